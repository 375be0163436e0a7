#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tee_host_info
short_description: Report what a host can do for confidential computing (TDX, SEV, SNP, SGX, GPU CC)
version_added: 0.1.0
author:
  - confidential.tee contributors (@confidential-tee)
description:
  - Reads the host's C(/proc/cpuinfo) flags, KVM module parameters, kernel command line, TEE devices,
    IOMMU groups, vsock devices, the TDX Quote Generation Service socket and the kernel version, and
    summarises per technology (TDX, SEV, SEV-ES, SEV-SNP, SGX) whether it is supported, enabled and
    ready, with the reasons when it is not and how to fix them.
  - When C(nvidia-smi) is available, also reports the NVIDIA GPU confidential-computing state from
    C(nvidia-smi conf-compute -q), C(-f), C(-grs) and C(nvidia-smi -q).
  - Absent hardware is a fact (V(false) or V(null)), never an error. An unreadable or malformed file, or
    a failing or timed-out C(nvidia-smi), is a fact plus an entry in RV(host.warnings) naming it.
  - The module only reads; it never changes the host.
extends_documentation_fragment:
  - confidential.tee.host_root
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
options:
  gather_gpu:
    description:
      - Run C(nvidia-smi) to report GPU confidential-computing state.
      - Without O(nvidia_smi_path), C(nvidia-smi) is looked up on E(PATH) and run only when O(host_root)
        is C(/), because it describes the machine the module runs on, not a mounted host tree.
      - C(nvidia-smi) opens every GPU; set V(false) where that must not happen.
    type: bool
    default: true
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) binary to run, on the machine the module runs on.
      - When given, it is run whatever O(host_root) is (for example from a DaemonSet that mounts the
        host at C(/host) and has the NVIDIA tools in its image).
      - A path that does not exist is reported in RV(host.warnings), not as a failure.
    type: path
  gpu_timeout:
    description:
      - Seconds each C(nvidia-smi) command may run before it is killed and reported as timed out.
    type: int
    default: 20
  qgs_socket_path:
    description:
      - Host path of the TDX Quote Generation Service's Unix socket, as configured for QGS and for KubeVirt's
        C(spec.configuration.confidentialCompute.tdx.attestation.qgsSocketPath).
    type: path
    default: /var/run/tdx-qgs/qgs.socket
  gather_virtual:
    description:
      - Also set Ansible's own virtualization facts (C(virtualization_type), C(virtualization_role),
        C(virtualization_tech_guest), C(virtualization_tech_host)), computed by the collector that
        M(ansible.builtin.setup) runs for C(gather_subset=virtual), in the same round trip.
      - Like that subset, they describe the machine the module runs on, whatever O(host_root) is.
      - The host roles recognise containers from these facts and skip their own C(setup) call when they are set.
    type: bool
    default: false
    version_added: 0.1.0
  capacity:
    description:
      - Also read the misc cgroup's TEE key capacity and usage, exactly as M(confidential.tee.tee_capacity_info)
        returns them with its defaults, into RV(host.capacity).
      - Saves a second module round trip per host when a play needs both.
    type: bool
    default: false
  preflight:
    description:
      - Also return the preflight verdict in RV(host.preflight), that is PASS, FAIL or SKIP per check (TDX,
        SEV-ES/SEV-SNP, free keys, vsock, IOMMU and GPU passthrough, GPU confidential computing, attestation), with a
        remediation for every failure, as data and as a short table.
      - Implies O(capacity=true), and the capacity report then also lists the top-level cgroups
        (C(cgroups), one level deep) with their C(misc.events) counters.
      - Reads the hardware key registers where they answer a question (RV(host.hardware_keys)); all of it in
        the same single module round trip.
      - The fact C(tee_host) is not set in this mode (register the result), because the result is several times larger
        and setting it twice doubles what the controller processes per host.
    type: bool
    default: false
  min_free_keys:
    description:
      - With O(preflight=true), the free keys (C(tdx) on Intel, C(sev_es) on AMD) below which the C(keys.free)
        check fails.
    type: int
    default: 1
  attestation:
    description:
      - With O(preflight=true), the result of an attestation check to include as the C(attestation.chain) check.
      - A dict with C(verdict) (V(PASS), V(FAIL) or V(SKIP)) or C(ok) (bool), C(msg) and, for failures,
        C(remediation); a registered module result with C(failed) works too.
      - Without it, the attestation section is V(SKIP) and says why.
    type: dict
  result:
    description:
      - V(full) returns every fact in RV(host).
      - V(fleet) needs O(preflight=true) and returns only what M(confidential.tee.tee_fleet_report) reads (about 60 %
        of the bytes; kernel release, CPU vendor, a GPU summary, the misc cgroup resources and top-level cgroups, the
        TDX key register summary, the problems of RV(host.warnings), the whole RV(host.preflight)). The fleet
        playbook uses it, so that the host serialises less and the controller parses, registers and passes on less
        per node.
    type: str
    choices: [full, fleet]
    default: full
notes:
  - Also sets the fact C(tee_host) to the same value as RV(host), except with O(preflight=true).
  - C(nvidia-smi) runs with a time limit (O(gpu_timeout)) and its output is bounded to 4 MiB; bytes that are
    not UTF-8 are replaced, never an error.
  - Files are read through the collection's host reader, under O(host_root), with symbolic links resolved
    inside O(host_root); FIFOs and devices are never opened, and reads are bounded.
seealso:
  - module: confidential.tee.tee_capacity_info
  - module: confidential.tee.tee_capacity_check
"""

EXAMPLES = r"""
- name: Read what this host can do for confidential computing
  confidential.tee.tee_host_info:
  register: tee

- name: Stop when TDX is not ready, saying why
  ansible.builtin.assert:
    that: tee.host.tdx.ready
    fail_msg: "{{ tee.host.tdx.reasons | join('; ') }}"

- name: Read a node's root mounted at /host from a DaemonSet, GPU through the image's nvidia-smi
  confidential.tee.tee_host_info:
    host_root: /host
    nvidia_smi_path: /usr/bin/nvidia-smi
    gpu_timeout: 30

# example: skip: /tmp/nodes/tdx-node-1 is a tree teesim node build --out wrote (the example run reads its own)
- name: Read a simulated node tree without touching any GPU
  confidential.tee.tee_host_info:
    host_root: /tmp/nodes/tdx-node-1
    gather_gpu: false

- name: Host facts and TEE key capacity in one round trip
  confidential.tee.tee_host_info:
    capacity: true
  register: node

- name: Preflight verdict (PASS/FAIL/SKIP per check with fixes) in one round trip
  confidential.tee.tee_host_info:
    preflight: true
    min_free_keys: 4
  register: node

- name: Print the verdict as a table
  ansible.builtin.debug:
    msg: "{{ node.host.preflight.table }}"

- name: Use the fact it sets
  ansible.builtin.debug:
    msg: >-
      SNP ready: {{ ansible_facts.tee_host.snp.ready }},
      IOMMU groups: {{ ansible_facts.tee_host.iommu.groups }}

- name: Only what the fleet report reads, in one round trip per node (as playbooks/fleet_report.yml does)
  confidential.tee.tee_host_info:
    preflight: true
    result: fleet
    gather_gpu: false
  register: tee_fleet_node
"""

RETURN = r"""
host:
  description:
    - Everything the module found. The same value is set as the fact C(tee_host) (not with O(preflight=true)).
    - Booleans are V(null) where the answer could not be determined (for example an unreadable file).
    - With O(result=fleet), only the keys C(kernel) (C(release), C(version)), C(tee_vendor), C(gpu) (C(probed),
      C(present), C(cc_capable), C(cc_state), C(ready_state), C(gpus) with C(name)), C(capacity)
      (C(misc_controller), C(resources), C(cgroups)), C(hardware_keys) (C(tdx_misc_resource), C(tdx_misc_reason),
      C(tdx) with C(readable) and C(tdx_guest_keyids)), C(problems) and C(warnings) (the same, deprecated; each
      with C(problem) only) and C(preflight).
  returned: always
  type: dict
  contains:
    host_root:
      description: The O(host_root) the files were read under.
      type: str
      sample: /
    kernel:
      description: Kernel release from C(/proc/sys/kernel/osrelease), falling back to C(/proc/version).
      type: dict
      contains:
        release:
          description: The release string, V(null) when neither file gave one.
          type: str
          sample: 6.16.0-tdx
        version:
          description: Major, minor and patch numbers parsed from the release, V(null) when unparsable.
          type: list
          elements: int
          sample: [6, 16, 0]
        source:
          description: The file the release was read from.
          type: str
          sample: /proc/sys/kernel/osrelease
    cpu:
      description: From C(/proc/cpuinfo).
      type: dict
      contains:
        readable:
          description: Whether C(/proc/cpuinfo) could be read.
          type: bool
        vendor:
          description: C(vendor_id) of the first processor.
          type: str
          sample: GenuineIntel
        model_name:
          description: C(model name) of the first processor.
          type: str
        processors:
          description: Number of processors listed.
          type: int
        flags:
          description:
            - Whether each TEE-relevant flag is set on every processor (V(null) when unknown).
            - Keys C(tdx_host_platform), C(sev), C(sev_es), C(sev_snp), C(sgx), C(sgx_lc), C(hypervisor),
              C(tdx_guest).
          type: dict
          sample: {"tdx_host_platform": true, "sgx": true, "sgx_lc": true, "sev": false, "hypervisor": false}
    kvm:
      description: KVM module parameters as the kernel reports them after hardware setup.
      type: dict
      contains:
        intel:
          description: C(loaded) (C(/sys/module/kvm_intel) exists) and C(tdx) (parameter is Y/1).
          type: dict
          sample: {"loaded": true, "tdx": true}
        amd:
          description:
            - C(loaded) and the C(sev), C(sev_es), C(sev_snp) parameters of C(kvm_amd).
            - C(ciphertext_hiding) is the C(ciphertext_hiding_asids) parameter (kernel 6.18+, a number, not a
              bool) as C(path), C(present), C(asids) and C(problem); RV(host.sev_asids) says what it means.
          type: dict
          sample: {"loaded": true, "sev": true, "sev_es": true, "sev_snp": true,
                   "ciphertext_hiding": {"path": /sys/module/kvm_amd/parameters/ciphertext_hiding_asids,
                                         "present": true, "asids": 16, "problem": null}}
    sev_asids:
      description:
        - SNP and SEV-ES ASID capacity, each with its source. Without ciphertext hiding both draw from one joint
          range (C(shared) true), the C(sev_es) line of C(misc.capacity). With C(kvm_amd.ciphertext_hiding_asids=N)
          (Linux 6.18+ C(arch/x86/kvm/svm/sev.c)) SNP guests get ASIDs 1..N and SEV-ES guests N+1..MIN_SEV_ASID-1,
          while C(misc.capacity) and C(misc.current) still count both as C(sev_es).
        - C(ciphertext_hiding) (V(null) when the parameter could not be read), C(ciphertext_hiding_asids),
          C(joint) (C(capacity), C(source)), C(snp) and C(sev_es) (C(capacity), C(asid_range), C(source),
          C(shared)), C(reasons) (why a value is V(null)) and C(summary).
        - The joint count needs C(misc.capacity) (O(capacity=true) or O(preflight=true)), or CPUID 0x8000001F
          (O(preflight=true)); without them only the SNP count of a split is known.
      type: dict
      sample: {"ciphertext_hiding": true, "ciphertext_hiding_asids": 16,
               "joint": {"capacity": 99, "source": misc.capacity sev_es},
               "snp": {"capacity": 16, "asid_range": [1, 16], "shared": false},
               "sev_es": {"capacity": 83, "asid_range": [17, 99], "shared": false}}
    boot:
      description:
        - The post-boot verdict for this CPU's TEE (TDX on Intel, SEV-SNP on AMD), as the host roles'
          verification and C(confidential.tee.verify_node) use it. C(ok), C(vendor), C(technology) and
          C(reasons) (the blocking reasons of RV(host.tdx) or RV(host.snp); empty when C(ok)).
      type: dict
      sample: {"ok": false, "vendor": amd, "technology": SEV-SNP,
               "reasons": ["the IOMMU default domain is passthrough (iommu=pt), ..."]}
    tee_vendor:
      description:
        - V(intel) or V(amd) from the CPU's C(vendor_id), V(null) for any other CPU or an unreadable cpuinfo.
          Roles and playbooks choose TDX or SEV-SNP from this fact.
      type: str
      sample: intel
    cmdline:
      description:
        - What the kernel made of C(/proc/cmdline), following its own tokenizer and parameter handlers
          (quotes, C(-) and C(_) alike in names, every occurrence of early parameters processed in order,
          comma-separated C(iommu=) options, C(nohibernate) or C(hibernate=no)). Only the relevant arguments
          are returned (C(args)), never the whole line, which may carry credentials.
        - C(kvm_intel_tdx), C(kvm_amd_sev), C(kvm_amd_sev_es), C(kvm_amd_sev_snp) and C(mem_encrypt) are
          V(null) when the parameter is absent or its value is not a boolean the kernel accepts (then
          C(problems) says so). Every value is V(null) when the file could not be read.
        - C(iommu.passthrough) is V(true)/V(false) when the command line decides the IOMMU default domain and
          V(null) when the kernel's build default applies; C(iommu.passthrough_args) lists the arguments that
          decided it. C(iommu_passthrough_remedy) gives the C(present)/C(absent) lists for
          M(confidential.tee.kernel_cmdline) that turn passthrough off while keeping the other C(iommu=) options.
      type: dict
      sample:
        readable: true
        source: /proc/cmdline
        nohibernate: true
        nohibernate_args: [nohibernate]
        kvm_intel_tdx: true
        kvm_amd_sev: null
        kvm_amd_sev_es: null
        kvm_amd_sev_snp: null
        intel_iommu_on: true
        iommu_off: false
        iommu_pt: true
        iommu: {"passthrough": true, "passthrough_args": ["iommu=pt,nomerge"], "disabled": false,
                "disabled_args": [], "intel_iommu_on": true, "amd_pgtable_v2": false}
        iommu_passthrough_remedy: {"needed": true, "present": ["iommu=nomerge"], "absent": ["iommu=pt,nomerge"]}
        mem_encrypt: null
        args: [nohibernate, kvm_intel.tdx=1, intel_iommu=on, "iommu=pt,nomerge"]
        init_args_present: false
        problems: []
    devices:
      description: Whether C(/dev/sev), C(/dev/sgx_enclave), C(/dev/sgx_provision), C(/dev/vhost-vsock)
        and C(/dev/vsock) exist.
      type: dict
      sample: {"sev": false, "sgx_enclave": true, "sgx_provision": true, "vhost_vsock": true, "vsock": true}
    iommu:
      description:
        - IOMMU groups in C(/sys/kernel/iommu_groups), the domain types they use (C(group_types), from each
          group's C(type) file; C(identity) is passthrough), the command-line parameters, and the verdict
          C(enabled), C(passthrough) (the running kernel's groups first, else the command line; V(null) when
          unknown), C(ready) and C(reasons).
      type: dict
      sample: {"groups": 112, "enabled": true, "group_types": {"DMA-FQ": 112}, "default_domain": DMA-FQ,
               "passthrough": false, "cmdline_intel_iommu_on": true, "cmdline_iommu_pt": false,
               "cmdline_iommu_off": false, "ready": true, "reasons": []}
    pci:
      description:
        - PCI functions from C(/sys/bus/pci/devices) with C(bdf), C(vendor), C(device), C(class) (C(0xCCSS), the
          base class and subclass), the bound C(driver) and the C(iommu_group), each V(null) when unknown.
          C(readable) is V(false) when the directory could not be listed.
      type: dict
      sample: {"readable": true, "devices": [{"bdf": "0000:17:00.0", "vendor": "0x10de", "device": "0x2330",
               "class": "0x0302", "driver": vfio-pci, "iommu_group": "31"}]}
    power:
      description:
        - C(hibernation_available) is whether C(/sys/power/state) offers C(disk) (the kernel refuses to
          initialise TDX while it does), C(states) the listed states, C(lockdown) the active kernel lockdown
          level from C(/sys/kernel/security/lockdown). V(null) where the file is absent or unreadable.
      type: dict
      sample: {"states": [freeze, mem], "hibernation_available": false, "lockdown": none}
    vsock:
      description: Whether C(/dev/vhost-vsock) (VM host side) and C(/dev/vsock) exist.
      type: dict
      sample: {"vhost_vsock": true, "vsock": true}
    modules:
      description:
        - Whether each TEE-relevant kernel module is loaded (C(/sys/module/<name>) exists), V(null) when it cannot
          be told. Names are C(kvm), C(kvm_intel), C(kvm_amd), C(ccp), C(vhost_vsock), C(vsock_loopback), C(vfio),
          C(vfio_pci), C(vfio_iommu_type1), C(nvidia), C(nvidia_uvm), C(nouveau).
      type: dict
      sample: {"kvm_intel": true, "nvidia": false, "vfio_pci": true}
    qgs:
      description: The TDX Quote Generation Service socket at O(qgs_socket_path).
      type: dict
      sample: {"path": "/var/run/tdx-qgs/qgs.socket", "present": true, "is_socket": true}
    tdx:
      description:
        - C(supported) is the C(tdx_host_platform) CPU flag, C(enabled) the C(kvm_intel) C(tdx) parameter,
          C(cmdline_ready) means C(kvm_intel.tdx=1) and C(nohibernate) are on the command line,
          C(attestation_ready) that the QGS socket exists, C(ready) that TDs can be launched.
        - C(reasons) says what blocks C(ready) and how to fix it; C(advice) lists non-blocking problems.
        - With O(capacity=true) or O(preflight=true), C(misc_capacity) is the C(tdx) line of C(misc.capacity), and
          C(ready) also needs TDX KeyIDs there on kernels that count them (6.16+). Nothing is decided from C(dmesg)
          text, whose wording changed in 7.1 (the TDX module is initialised at boot); the reasons quote what 6.x
          and 7.1+ print.
      type: dict
      sample:
        supported: true
        enabled: false
        misc_capacity: 0
        cmdline_ready: false
        attestation_ready: false
        ready: false
        reasons:
          - "kvm_intel tdx parameter is N: add kvm_intel.tdx=1 to the kernel command line (or `options
            kvm_intel tdx=1` in /etc/modprobe.d/) and reboot"
        advice: []
    sev:
      description:
        - SEV. C(supported) is the CPU flag, C(enabled) the C(kvm_amd) parameter, C(cmdline_ready) that the
          command line does not disable it, C(device) that C(/dev/sev) exists, C(ready) that guests can
          be launched, C(reasons) what blocks it.
      type: dict
      sample: {"supported": true, "enabled": true, "cmdline_ready": true, "device": true, "ready": true,
               "reasons": []}
    sev_es:
      description: SEV-ES, same keys as RV(host.sev). SEV-ES guests charge the C(sev_es) misc resource.
      type: dict
    snp:
      description:
        - SEV-SNP (CPU flag and parameter C(sev_snp)), same keys as RV(host.sev).
        - SEV-SNP guests charge the C(sev_es) misc resource; there is no C(snp) resource.
      type: dict
    sgx:
      description: SGX (used by TDX attestation) with C(supported), C(flexible_launch_control),
        C(enclave_device), C(provision_device), C(ready) and C(reasons).
      type: dict
    gpu:
      description:
        - NVIDIA GPU confidential computing. C(probed) is V(false) when C(nvidia-smi) was not run
          (C(reasons) says why) and every other value is then V(null) or empty.
        - C(cc_state) and C(multi_gpu_mode) are as C(nvidia-smi) prints them, C(ready_state) is
          V(ready) or V(not-ready), C(ready) means CC is on (not DevTools) and the GPUs are ready.
      type: dict
      sample:
        probed: true
        nvidia_smi: /usr/bin/nvidia-smi
        present: true
        driver_version: 580.159.04
        cuda_version: "13.0"
        cc_capable: true
        cc_state: "OFF"
        cc_enabled: false
        devtools: false
        cc_features: {"cc_status": "OFF"}
        cpu_cc_capabilities: None
        multi_gpu_mode: None
        ready_state: not-ready
        ready: false
        gpus:
          - index: 0
            bus_id: "00000000:00:06.0"
            name: NVIDIA H100 80GB HBM3
            architecture: Hopper
            uuid: GPU-00000000-0000-0000-0000-000000000000
            vbios_version: 96.00.DA.00.0C
            virtualization_mode: Pass-Through
            cc_protected_memory_mib: {"total": 0, "used": 0, "free": 0}
        reasons:
          - "GPU CC mode is off (CC state OFF): switch it on with NVIDIA's gpu-admin-tools"
    capacity:
      description:
        - Only with O(capacity=true) or O(preflight=true). The misc cgroup facts C(misc_controller), C(resources),
          C(unknown_resources), C(resource_aliases), C(problems) (and C(issues), the same list, deprecated until
          release 0.3.0) and C(notes), as returned by
          M(confidential.tee.tee_capacity_info) with its default options.
        - With O(preflight=true) also C(cgroups), the top-level cgroups only (C(cgroups=true), C(cgroup_depth=1)).
      returned: when O(capacity=true) or O(preflight=true)
      type: dict
      sample:
        misc_controller: {"present": true, "cgroup_version": 2, "path": "/sys/fs/cgroup", "reason": null}
        resources:
          tdx: {"name": tdx, "capacity": 63, "current": 2, "free": 61}
    hardware_keys:
      description:
        - Only with O(preflight=true). Key counts read from the hardware where the kernel does not give them, or as
          a cross-check. C(tdx) is MSR 0x87 (IA32_MKTME_KEYID_PARTITIONING, bits 31:0 MKTME KeyIDs, 63:32 TDX
          KeyIDs, guests get TDX KeyIDs - 1), read on Intel hosts whose misc cgroup gives no TDX capacity.
          C(sev) is CPUID 0x8000001F (ECX max ASID, EDX min SEV ASID, so sev_es = EDX - 1) on AMD hosts, with
          C(cross_check) against C(misc.capacity). C(tdx_misc_resource) says whether the kernel counts TDX keys.
        - Each register has C(readable), C(path) and C(problem) (why it could not be read, for example
          C(cannot be opened) with the error, without root, or that the C(msr) driver is not loaded).
      returned: when O(preflight=true)
      type: dict
      sample:
        tdx_misc_resource: false
        tdx_misc_reason: "kernel 6.1.0 predates the tdx misc resource (6.16) ..."
        tdx: {"readable": true, "path": "/dev/cpu/0/msr", "problem": null, "raw": "0x000000200000001f",
              "mktme_keyids": 31, "tdx_keyids": 32, "tdx_guest_keyids": 31, "tdx_keyid_range": [32, 63]}
        sev: null
    preflight:
      description:
        - Only with O(preflight=true). C(verdict) (V(PASS), V(FAIL) or V(SKIP)), C(ready) (every check of the
          CPU TEE section passes and free keys do not fail), C(technology), C(counts) per verdict, C(blocking)
          (what keeps C(ready) false), C(sections) (each with C(id), C(title), C(verdict), C(reason) when the
          whole section does not apply, and C(checks), each a check record as every module of this collection
          returns one (docs/modules.md, result vocabulary) - C(name), C(status) (V(PASS), V(FAIL) or V(SKIP)),
          C(ok), C(message), C(fix) (for failures) - with C(title) and C(source)), and C(table), the same as lines
          for people.
        - Each check also repeats C(name), C(status), C(message) and C(fix) as C(id), C(verdict), C(detail) and
          C(remediation); deprecated, removed in release 0.3.0.
      returned: when O(preflight=true)
      type: dict
      sample:
        verdict: FAIL
        ready: false
        technology: TDX
        counts: {"PASS": 3, "FAIL": 4, "SKIP": 5}
        table:
          - "FAIL  NOT READY (TDX); 3 PASS, 4 FAIL, 5 SKIP"
          - "FAIL  Intel TDX"
          - "  FAIL  CPU flag tdx_host_platform  CPU flag tdx_host_platform absent and this is a virtual machine"
          - "        fix: run on bare metal"
    problems:
      description:
        - Files that could not be read or parsed (FIFOs and devices are refused unopened), and C(nvidia-smi)
          commands that failed, each with C(path), C(problem), C(line_number) and C(line) (both V(null) unless a
          line is at fault). They are also emitted as module warnings.
        - The one name of a problem list in this collection (docs/modules.md, result vocabulary).
      type: list
      elements: dict
      sample: [{"path": "/proc/cpuinfo", "problem": "unreadable: Permission denied", "line_number": null,
                "line": null}]
    warnings:
      description: Deprecated, removed in release 0.3.0; read RV(host.problems), the same list.
      type: list
      elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.host.gpu_unprobed import empty_gpu
from ansible_collections.confidential.tee.plugins.module_utils.host.host_facts import HostRootError, gather_host_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import apply_capacity
from ansible_collections.confidential.tee.plugins.module_utils.host.sev_asids import sev_asid_split


def _gpu_facts(module, host):
    """``(gpu fact, warnings)`` for :func:`gather_host_facts`; a skipped probe says why in its reasons."""
    params = module.params
    if not params["gather_gpu"]:
        return empty_gpu("not gathered: gather_gpu is false"), []
    path = params["nvidia_smi_path"]
    if path:
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            problem = "nvidia_smi_path is not an executable file: fix the path or set gather_gpu: false"
            return empty_gpu(problem), [{"path": path, "problem": problem}]
    else:
        if not host.is_live:
            return (
                empty_gpu(
                    "not gathered: host_root is %s, and nvidia-smi on PATH would describe the machine "
                    "running the module instead; set nvidia_smi_path to run it anyway" % host.host_root
                ),
                [],
            )
        path = module.get_bin_path("nvidia-smi")
        if not path:
            return empty_gpu("nvidia-smi not found on PATH: no NVIDIA driver installed on this host"), []
    # Imported here, not at the top: a host that is not probed (the fleet report's simulated or /host-mounted
    # nodes, gather_gpu: false) then never compiles the probe and common/process (about 500 lines) on the host.
    # AnsiballZ still packs them: ansible-core 2.19's ModuleDepFinder (executor/module_common.py) visits the
    # imports inside functions too.
    from ansible_collections.confidential.tee.plugins.module_utils.host.gpu_facts import (
        bounded_runner,
        probe_gpu,
    )

    # Bytes in, bounded, with a time limit: nvidia-smi's output never breaks the module's JSON.
    return probe_gpu(path, bounded_runner(dict(os.environ, LC_ALL="C")), params["gpu_timeout"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host_root=dict(type="path", default="/"),
            gather_gpu=dict(type="bool", default=True),
            nvidia_smi_path=dict(type="path"),
            gpu_timeout=dict(type="int", default=20),
            capacity=dict(type="bool", default=False),
            gather_virtual=dict(type="bool", default=False),
            qgs_socket_path=dict(type="path", default="/var/run/tdx-qgs/qgs.socket"),
            preflight=dict(type="bool", default=False),
            min_free_keys=dict(type="int", default=1, no_log=False),
            attestation=dict(type="dict"),
            result=dict(type="str", choices=["full", "fleet"], default="full"),
        ),
        supports_check_mode=True,
    )
    if module.params["min_free_keys"] < 0:
        module.fail_json(
            msg="min_free_keys must be 0 or more, got %d: it is the number of free TEE keys the keys.free check "
            "requires" % module.params["min_free_keys"]
        )
    if module.params["gpu_timeout"] < 1:
        module.fail_json(
            msg="gpu_timeout must be at least 1 second, got %d: raise it, or set gather_gpu: false to skip "
            "nvidia-smi" % module.params["gpu_timeout"]
        )
    if module.params["result"] == "fleet" and not module.params["preflight"]:
        module.fail_json(
            msg="result: fleet is the fleet report's view of the preflight facts: set preflight: true with it, or "
            "result: full"
        )
    host = open_host(module)
    try:
        facts = gather_host_facts(host, gpu=_gpu_facts(module, host), qgs_socket=module.params["qgs_socket_path"])
    except HostRootError as exc:
        module.fail_json(msg=str(exc))
    params = module.params
    # Imported only where used: AnsiballZ compiles every imported module from source on each host, and the plain call
    # (the cluster playbook's and tee_node's, once per node) needs neither the preflight checks nor the misc cgroup
    # parser (about 1,600 of the 3,700 lines). AnsiballZ still packs them (its dependency finder sees these imports).
    if params["preflight"]:
        from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import gather_preflight

        gather_preflight(host, facts, params["min_free_keys"], params["attestation"])
    elif params["capacity"]:
        from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts

        facts["capacity"] = capacity_facts(host)
        facts["sev_asids"] = sev_asid_split(facts["kvm"]["amd"], facts["capacity"])
        apply_capacity(facts, facts["capacity"])
    for issue in facts.get("capacity", {}).get("problems", []):
        line = ":%s" % issue["line_number"] if issue["line_number"] else ""
        module.warn("%s%s: %s" % (issue["path"], line, issue["problem"]))
    for warning in facts["problems"]:
        module.warn("%s: %s" % (warning["path"], warning["problem"]))
    if params["preflight"]:
        # Register the result instead: the facts twice would double the data the controller processes per host.
        if params["result"] == "fleet":
            from ansible_collections.confidential.tee.plugins.module_utils.host.fleet_view import fleet_view

            facts = fleet_view(facts)
        virtual = _virtual_facts(module)
        module.exit_json(changed=False, host=facts, **({"ansible_facts": virtual} if virtual else {}))
    module.exit_json(changed=False, host=facts, ansible_facts={"tee_host": facts, **_virtual_facts(module)})


def _virtual_facts(module):
    """setup's virtual subset, from Ansible's own Linux collector (empty unless gather_virtual is set)."""
    if not module.params["gather_virtual"]:
        return {}
    # Imported only here: the collector package is about as large as setup's own import, and one module call is
    # about 5 s of CPU on an emulated host (docs/host-truth.md, "Time").
    from ansible.module_utils.facts.virtual.linux import LinuxVirtualCollector

    facts = LinuxVirtualCollector().collect(module=module)
    # The technologies are sets: sorted, so that the same host gives the same facts on every run.
    return {key: sorted(value) if isinstance(value, set) else value for key, value in facts.items()}


if __name__ == "__main__":
    main()
