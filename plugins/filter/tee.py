# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import tee_registry

# What playbooks may read of a record (common/tee_registry.py); the NFD and KubeVirt details stay with the plan.
FIELDS = ("key", "short", "name", "vendor", "vendor_name", "cpu_vendor", "misc", "host_role", "preflight")


def tee_technology(vendor):
    """The TEE of a ``tee_cpu_vendor`` value as a mapping of :data:`FIELDS` plus ``runtime_classes``; ``None`` for a
    vendor without one (``auto``, an unread cpuinfo, another CPU), so that a play can refuse it with its own words."""
    tech = tee_registry.of_vendor(vendor)
    if tech is None:
        return None
    return dict({field: getattr(tech, field) for field in FIELDS}, runtime_classes=list(tech.runtime_classes))


class FilterModule:
    def filters(self):
        return {"tee_technology": tee_technology}
