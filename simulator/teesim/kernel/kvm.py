"""What KVM does around the misc charge when it creates a TEE guest: key allocation and its real errors.

The misc controller (:mod:`teesim.kernel.misc`) only counts. KVM also allocates the hardware key, and the
order of the two decides the error a launch fails with (checked in Linux ``arch/x86/kvm/vmx/tdx.c`` 6.16 to
7.x and ``arch/x86/kvm/svm/sev.c`` 6.18 to 7.x):

* **TDX** (``__tdx_td_init``, reached through the ``KVM_TDX_INIT_VM`` ioctl): ``tdx_guest_keyid_alloc()``
  (an IDA over the guest KeyIDs, exactly the ``tdx`` misc capacity) comes *first* and fails with
  ``-ENOSPC`` ("No space left on device") when every KeyID is in use; only then is the misc cgroup
  charged, which fails with ``-EBUSY`` at a cgroup's ``misc.max``. Hardware exhaustion is therefore ENOSPC
  and counts no ``misc.events``; a cgroup limit is EBUSY and does.
* **SEV / SEV-ES / SNP** (``sev_asid_new``): the misc charge comes first (``-EBUSY`` past ``misc.max`` or
  the capacity, counted in ``misc.events``), then the ASID bitmap of the guest's own range; QEMU reports
  either as ``ret=-16``. With AMD ciphertext hiding (``kvm_amd.ciphertext_hiding_asids=N``) SNP guests get
  ASIDs 1..N and SEV-ES guests N+1..``sev_es``: an SNP launch past N fails ``-EBUSY`` *after* a successful
  charge (undone, so ``misc.current`` shows keys free and ``misc.peak`` keeps the bump), and SEV-ES launches
  fail ``-ENOTTY`` when N took the whole range (``min_asid > max_asid``).

Guests charging ``sev_es`` are SNP guests unless the caller says ``guest="sev-es"`` (the simulator's Kata
and KubeVirt consumers launch SNP guests). Simplifications: ASIDs are counted per range, not as a bitmap
(no recycling delay), and a failed TDX launch leaves no trace (the kernel frees the KeyID at once).
"""

from __future__ import annotations

import errno
from collections.abc import Mapping

from teesim.kernel.misc import ChargeError, MiscController
from teesim.kernel.profiles import KernelProfile

SNP, SEV_ES_GUEST = "snp", "sev-es"


class KvmKeys(MiscController):
    """A misc controller whose charges fail the way KVM's launches do (see the module docstring)."""

    def __init__(self, capacity: Mapping[str, int], profile: KernelProfile, ciphertext_hiding_asids: int | None = None):
        super().__init__(capacity, profile)
        joint = self.capacity("sev_es")
        hiding = min(ciphertext_hiding_asids or 0, joint)
        # sev.c: SNP [1..max_snp_asid], SEV-ES [min_sev_es_asid..max_sev_es_asid]; one joint range without hiding.
        self.snp_range = (1, hiding) if hiding else (1, joint)
        self.sev_es_range = (hiding + 1, joint) if hiding else (1, joint)
        self.split = bool(hiding)
        self._asids = {SNP: 0, SEV_ES_GUEST: 0}
        self._tdx_keyids = 0

    def try_charge(self, path: str, resource: str, amount: int = 1, guest: str | None = None) -> None:
        name = self._name(resource)
        if name == "tdx" and amount and self.capacity("tdx"):
            self._tdx_launch(path, amount)
            return
        super().try_charge(path, resource, amount)
        if name == "sev_es" and amount:
            kind = guest or SNP
            try:
                self._allocate_asids(path, kind, amount)
            except ChargeError:
                super().uncharge(path, resource, amount)  # sev_asid_new's e_uncharge
                raise

    def uncharge(self, path: str, resource: str, amount: int = 1, guest: str | None = None) -> None:
        name = self._name(resource)
        super().uncharge(path, resource, amount)
        if name == "tdx" and self.capacity("tdx"):
            self._tdx_keyids -= amount
        elif name == "sev_es":
            self._asids[guest or SNP] -= amount

    def asids_in_use(self, guest: str) -> int:
        return self._asids[guest]

    def _tdx_launch(self, path: str, amount: int) -> None:
        if self._tdx_keyids + amount > self.capacity("tdx"):
            raise ChargeError(errno.ENOSPC, path, "tdx", amount, None, "no free TDX KeyID (KVM_TDX_INIT_VM)")
        super().try_charge(path, "tdx", amount)  # EBUSY at a cgroup's misc.max
        self._tdx_keyids += amount

    def _allocate_asids(self, path: str, kind: str, amount: int) -> None:
        first, last = self.snp_range if kind == SNP else self.sev_es_range
        if first > last:
            raise ChargeError(errno.ENOTTY, path, "sev_es", amount, None, f"no {kind} ASID range (ciphertext hiding)")
        in_use = self._asids[SNP] + self._asids[SEV_ES_GUEST] if not self.split else self._asids[kind]
        if in_use + amount > last - first + 1:
            raise ChargeError(errno.EBUSY, path, "sev_es", amount, None, f"no free {kind} ASID in {first}..{last}")
        self._asids[kind] += amount
