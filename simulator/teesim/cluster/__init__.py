"""The cluster around the nodes: pods and consumers, scheduler and its queue, NFD, DRA, node state."""
