"""The cluster around the nodes: virtual clock, pods and consumers, scheduler, NFD, node state."""
