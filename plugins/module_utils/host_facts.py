# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""What a host can do for confidential computing, read from its files and from ``nvidia-smi``.

Pure Python, standard library only: the ``tee_host_info`` module (through AnsiballZ),
``scripts/gpu_probe.sh`` (imported by path) and tests use this same file.

Kernel facts this follows:

* ``tdx_host_platform`` is set in ``/proc/cpuinfo`` only after the kernel's ``tdx_init()`` succeeded
  (BIOS key split present, at least two KeyIDs, hibernation unavailable): its absence on a TDX
  machine very often means ``nohibernate`` is missing from the command line.
* ``/sys/module/kvm_intel/parameters/tdx`` and ``/sys/module/kvm_amd/parameters/{sev,sev_es,sev_snp}``
  are written back by KVM after hardware setup, so ``Y`` means "usable now", not merely "requested".
  Bool parameters print ``Y``/``N``; older kernels had ``sev`` as an int printing ``1``/``0``.
* Module parameters on the command line use the kernel's ``kstrtobool`` rules, ``-`` and ``_`` are
  the same in parameter names, the last occurrence wins and everything after ``--`` goes to init.

Nothing here raises on bad input: absent hardware is a fact (``False``/``None``) and an unreadable or
malformed file is a fact plus an entry in ``warnings`` naming the path.
"""

from __future__ import annotations

import errno
import os
import re
import stat

# cpuinfo of a 512-CPU host is about 1 MiB; anything far larger is not a cpuinfo.
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_COMMAND_OUTPUT = 4 * 1024 * 1024

CPUINFO = "proc/cpuinfo"
CMDLINE = "proc/cmdline"
OSRELEASE = "proc/sys/kernel/osrelease"
PROC_VERSION = "proc/version"
KVM_INTEL_DIR = "sys/module/kvm_intel"
KVM_AMD_DIR = "sys/module/kvm_amd"
IOMMU_GROUPS = "sys/kernel/iommu_groups"
DEV_SEV = "dev/sev"
DEV_SGX_ENCLAVE = "dev/sgx_enclave"
DEV_SGX_PROVISION = "dev/sgx_provision"
DEV_VHOST_VSOCK = "dev/vhost-vsock"
DEV_VSOCK = "dev/vsock"
QGS_SOCKET = "var/run/tdx-qgs/qgs.socket"

CPU_FLAGS = ("tdx_host_platform", "sev", "sev_es", "sev_snp", "sgx", "sgx_lc", "hypervisor", "tdx_guest")
KVM_AMD_PARAMS = ("sev", "sev_es", "sev_snp")
# Command-line parameters worth reporting; the rest of the line (root=, credentials of network boot
# setups...) is deliberately not returned.
RELEVANT_CMDLINE = (
    "nohibernate",
    "kvm_intel.tdx",
    "kvm_amd.sev",
    "kvm_amd.sev_es",
    "kvm_amd.sev_snp",
    "intel_iommu",
    "amd_iommu",
    "iommu",
    "mem_encrypt",
)

# Upstream kernels that first carried KVM host support, used only to word advice.
KVM_TDX_SINCE = (6, 16)
KVM_SNP_SINCE = (6, 11)

_KERNEL_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
_PROC_VERSION_RE = re.compile(r"^\s*Linux version (\S+)")
_GPU_HEADER_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
# nvidia-smi -q pads keys and separates them with " : "; a bare ":" belongs to values such as bus ids.
_SMI_KV_RE = re.compile(r"^(\s*)(\S.*?)\s+:(?:\s(.*))?$")
_MIB_RE = re.compile(r"^(\d+)\s*MiB$")


def _text(data):
    """Parsers accept ``str`` or ``bytes``; undecodable bytes become U+FFFD instead of an exception."""
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return str(data)


def _version_tuple_text(version):
    return ".".join(str(part) for part in version)


# ---------------------------------------------------------------------------------------------------
# Pure parsers of file contents
# ---------------------------------------------------------------------------------------------------


def parse_cpuinfo(data):
    """Flags present on *every* processor (a TEE needs all CPUs), vendor and model.

    Returns ``{"flags": set | None, "vendor": str | None, "model_name": str | None,
    "processors": int, "flags_consistent": bool}``; ``flags`` is ``None`` when no ``flags`` line exists.
    """
    flags = None
    consistent = True
    vendor = None
    model_name = None
    processors = 0
    last_flags_text = None
    for line in _text(data).splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "processor":
            processors += 1
        elif key == "vendor_id" and vendor is None:
            vendor = value.strip() or None
        elif key == "model name" and model_name is None:
            model_name = value.strip() or None
        elif key == "flags":
            # Hundreds of CPUs usually print the same line: skip re-splitting identical text.
            if value == last_flags_text:
                continue
            last_flags_text = value
            these = set(value.split())
            if flags is None:
                flags = these
            elif these != flags:
                consistent = False
                flags = flags & these
    return {
        "flags": flags,
        "vendor": vendor,
        "model_name": model_name,
        "processors": processors,
        "flags_consistent": consistent,
    }


def parse_sysfs_bool(data):
    """A module parameter file: ``(True|False|None, problem|None)``.

    KVM prints bool parameters as ``Y``/``N``; older ``kvm_amd.sev`` was an int printing ``1``/``0``.
    """
    value = _text(data).strip()
    if value in ("Y", "y", "1"):
        return True, None
    if value in ("N", "n", "0"):
        return False, None
    shown = value if len(value) <= 40 else value[:40] + "..."
    return None, "unexpected value %r (expected Y, N, 1 or 0)" % shown


def kernel_bool(value):
    """The kernel's ``kstrtobool`` on a command-line value; a bare ``param`` means true (``None`` in)."""
    if value is None:
        return True
    if not value:
        return None
    first = value[0]
    if first in "yYtT1":
        return True
    if first in "nNfF0":
        return False
    if first in "oO" and len(value) > 1:
        if value[1] in "nN":
            return True
        if value[1] in "fF":
            return False
    return None


def split_cmdline(data):
    """Tokens of a kernel command line, quotes grouping words as the kernel's ``next_arg`` does."""
    tokens = []
    current = []
    in_quote = False
    started = False
    for char in _text(data):
        if char == '"':
            in_quote = not in_quote
            started = True
            continue
        if char.isspace() and not in_quote:
            if started:
                tokens.append("".join(current))
                current = []
                started = False
            continue
        current.append(char)
        started = True
    if started:
        tokens.append("".join(current))
    return tokens


def parse_cmdline(data):
    """``{normalised name: value}`` of the kernel's own parameters; ``None`` value for bare words.

    Dashes become underscores in names (the kernel's ``parameq``), the last occurrence wins, and
    parsing stops at ``--`` because what follows belongs to init.
    """
    params = {}
    for token in split_cmdline(data):
        if token == "--":
            break
        name, sep, value = token.partition("=")
        if not name:
            continue
        params[name.replace("-", "_")] = value if sep else None
    return params


def _option_list(value):
    if value is None:
        return []
    return [item.strip().lower() for item in value.split(",") if item.strip()]


def cmdline_facts(params, readable=True):
    """The TEE/IOMMU meaning of parsed command-line parameters (``None``: not on the line)."""

    def flag(name):
        return kernel_bool(params[name]) if name in params else None

    intel_iommu = _option_list(params.get("intel_iommu"))
    amd_iommu = _option_list(params.get("amd_iommu"))
    iommu = _option_list(params.get("iommu"))
    mem_encrypt = params.get("mem_encrypt")
    return {
        "readable": readable,
        "nohibernate": "nohibernate" in params,
        "kvm_intel_tdx": flag("kvm_intel.tdx"),
        "kvm_amd_sev": flag("kvm_amd.sev"),
        "kvm_amd_sev_es": flag("kvm_amd.sev_es"),
        "kvm_amd_sev_snp": flag("kvm_amd.sev_snp"),
        "intel_iommu_on": "on" in intel_iommu,
        "iommu_off": "off" in intel_iommu or "off" in amd_iommu or "off" in iommu,
        "iommu_pt": "pt" in iommu,
        "mem_encrypt": None if mem_encrypt is None else mem_encrypt.strip().lower() == "on",
        "params": {name: params[name] for name in RELEVANT_CMDLINE if name in params},
    }


def parse_kernel_release(data):
    """``(release, [major, minor, patch] | None)`` from ``/proc/sys/kernel/osrelease``."""
    lines = _text(data).strip().splitlines()
    release = lines[0].strip() if lines else ""
    if not release or any(ord(char) < 32 or char == "\ufffd" for char in release):
        return None, None
    match = _KERNEL_VERSION_RE.match(release)
    if not match:
        return release, None
    return release, [int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)]


def parse_proc_version(data):
    """The release from ``/proc/version`` (``Linux version 6.8.0-48-generic (...) ...``)."""
    match = _PROC_VERSION_RE.match(_text(data))
    if not match:
        return None, None
    return parse_kernel_release(match.group(1))


# ---------------------------------------------------------------------------------------------------
# Pure parsers of nvidia-smi output
# ---------------------------------------------------------------------------------------------------


def _norm_key(key):
    return re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")


def parse_colon_lines(data):
    """``key: value`` lines (``conf-compute -f``/``-grs``/``-q``) as ``{normalised_key: value}``.

    The first occurrence of a key wins; lines without a colon (banners, blank lines) are ignored.
    """
    result = {}
    for line in _text(data).splitlines():
        key, sep, value = line.partition(":")
        # "[-f | --get-cc-feature]: Display ..." is nvidia-smi's help text, printed on unknown options.
        if not sep or key.lstrip().startswith("["):
            continue
        norm = _norm_key(key)
        if norm and norm not in result:
            result[norm] = value.strip()
    return result


def _normalise_ready(value):
    if value is None:
        return None
    text = re.sub(r"[\s_]+", "-", value.strip().lower())
    if text in ("ready", "not-ready"):
        return text
    return None


def _on_off(value):
    if value is None:
        return None
    text = value.strip().lower()
    # DevTools mode is CC with debugging allowed: the GPU encrypts, but it is not for production.
    if text in ("on", "enabled", "enable", "devtools"):
        return True
    if text in ("off", "disabled", "disable"):
        return False
    return None


def _capable(value):
    if value is None:
        return None
    text = value.strip().lower()
    if not text or text in ("none", "n/a") or "not" in text or "no " in text:
        return False
    if "capable" in text:
        return True
    return None


def parse_conf_compute_query(data):
    """``nvidia-smi conf-compute -q``: system-wide CC state of the GPUs.

    Returns ``None`` when the text has none of the expected fields (help text, errors, garbage).
    """
    fields = parse_colon_lines(data)
    wanted = {
        "cc_state": fields.get("cc_state"),
        "multi_gpu_mode": fields.get("multi_gpu_mode"),
        "cpu_cc_capabilities": fields.get("cpu_cc_capabilities"),
        "gpu_cc_capabilities": fields.get("gpu_cc_capabilities"),
        "ready_state": fields.get("cc_gpus_ready_state"),
    }
    if all(value is None for value in wanted.values()):
        return None
    wanted["ready_state"] = _normalise_ready(wanted["ready_state"]) or wanted["ready_state"]
    return wanted


def parse_conf_compute_features(data):
    """``nvidia-smi conf-compute -f``: ``{normalised key: value}``, e.g. ``{"cc_status": "OFF"}``."""
    fields = parse_colon_lines(data)
    return {key: value for key, value in fields.items() if key.startswith("cc") or "mode" in key}


def parse_ready_state(data):
    """``nvidia-smi conf-compute -grs``: ``"ready"``, ``"not-ready"`` or ``None``."""
    for key, value in parse_colon_lines(data).items():
        if "ready_state" in key:
            return _normalise_ready(value)
    return None


def _parse_indented(lines):
    """nvidia-smi's indented ``key : value`` tree as nested dicts (first occurrence of a key wins)."""
    root = {}
    stack = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        match = _SMI_KV_RE.match(line)
        if match:
            parent.setdefault(match.group(2).strip(), (match.group(3) or "").strip())
        else:
            section = {}
            if not isinstance(parent.get(line.strip()), dict):
                parent[line.strip()] = section
            stack.append((indent, section))
    return root


def _mib(value):
    match = _MIB_RE.match(value.strip()) if isinstance(value, str) else None
    return int(match.group(1)) if match else None


def _value(tree, *keys):
    node = tree
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if isinstance(node, dict):
        return None
    return None if node in ("", "N/A") else node


def parse_nvidia_smi_query(data):
    """``nvidia-smi -q``: driver and CUDA versions and one entry per GPU.

    Returns ``None`` when the text is not an nvidia-smi log (no driver version and no GPU block).
    """
    header = []
    blocks = []
    for line in _text(data).splitlines():
        match = _GPU_HEADER_RE.match(line)
        if match:
            blocks.append((match.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    top = _parse_indented(header)
    driver = _value(top, "Driver Version")
    if driver is None and not blocks:
        return None
    attached = _value(top, "Attached GPUs")
    gpus = []
    for index, (bus_id, lines) in enumerate(blocks):
        tree = _parse_indented(lines)
        protected = tree.get("Conf Compute Protected Memory Usage")
        gpus.append(
            {
                "index": index,
                "bus_id": bus_id,
                "name": _value(tree, "Product Name"),
                "architecture": _value(tree, "Product Architecture"),
                "uuid": _value(tree, "GPU UUID"),
                "vbios_version": _value(tree, "VBIOS Version"),
                "virtualization_mode": _value(tree, "GPU Virtualization Mode", "Virtualization Mode"),
                "cc_protected_memory_mib": None
                if not isinstance(protected, dict)
                else {key.lower(): _mib(protected.get(key)) for key in ("Total", "Used", "Free")},
            }
        )
    return {
        "driver_version": driver,
        "cuda_version": _value(top, "CUDA Version"),
        "attached_gpus": int(attached) if attached and attached.isdigit() else None,
        "gpus": gpus,
    }


# ---------------------------------------------------------------------------------------------------
# Reading a host tree
# ---------------------------------------------------------------------------------------------------


class HostRootError(ValueError):
    """``host_root`` is not a directory: nothing can be read, which is a usage error, not a fact."""


class HostReader:
    """Reads files under ``host_root``; every OS error becomes a warning, never an exception."""

    def __init__(self, host_root="/"):
        self.host_root = host_root or "/"
        self.warnings = []

    def path(self, rel):
        return os.path.join(self.host_root, rel.lstrip("/"))

    def warn(self, path, problem):
        self.warnings.append({"path": path, "problem": problem})

    def read(self, rel, expected=False, limit=MAX_FILE_BYTES):
        """Text of a file, or ``None`` when absent (warned only when ``expected``) or unreadable."""
        path = self.path(rel)
        try:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                if expected:
                    self.warn(path, "missing: facts derived from it are unknown")
                return None
            self.warn(path, "unreadable: %s" % (exc.strerror or exc))
            return None
        if len(data) > limit:
            self.warn(path, "larger than %d bytes: only the beginning was read" % limit)
            data = data[:limit]
        if b"\x00" in data:
            self.warn(path, "contains NUL bytes: not a text file as the kernel writes it")
        return data.decode("utf-8", "replace")

    def stat(self, rel):
        """``os.stat`` result, ``False`` when absent, ``None`` (with a warning) when it cannot be told."""
        path = self.path(rel)
        try:
            return os.stat(path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return False
            self.warn(path, "cannot be examined: %s" % (exc.strerror or exc))
            return None

    def exists(self, rel):
        result = self.stat(rel)
        return None if result is None else result is not False

    def isdir(self, rel):
        result = self.stat(rel)
        return None if result is None else result is not False and stat.S_ISDIR(result.st_mode)

    def listdir(self, rel):
        """Entries of a directory, ``[]`` when absent, ``None`` (with a warning) when unreadable."""
        path = self.path(rel)
        try:
            return sorted(os.listdir(path))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return []
            self.warn(path, "unreadable directory: %s" % (exc.strerror or exc))
            return None


def read_kernel(reader):
    release, version, source = None, None, None
    text = reader.read(OSRELEASE)
    if text is not None:
        release, version = parse_kernel_release(text)
        if release is None:
            reader.warn(reader.path(OSRELEASE), "no kernel release in it")
        else:
            source = reader.path(OSRELEASE)
    if release is None:
        text = reader.read(PROC_VERSION, expected=True)
        if text is not None:
            release, version = parse_proc_version(text)
            if release is None:
                reader.warn(reader.path(PROC_VERSION), "no 'Linux version <release>' at its start")
            else:
                source = reader.path(PROC_VERSION)
    return {"release": release, "version": version, "source": source}


def read_cpu(reader):
    text = reader.read(CPUINFO, expected=True)
    parsed = parse_cpuinfo(text) if text is not None else None
    flags = parsed["flags"] if parsed else None
    if parsed and flags is None:
        reader.warn(reader.path(CPUINFO), "no 'flags' line: CPU features are unknown")
    if parsed and not parsed["flags_consistent"]:
        reader.warn(reader.path(CPUINFO), "processors report different flags: only common flags count")
    return {
        "readable": text is not None,
        "vendor": parsed["vendor"] if parsed else None,
        "model_name": parsed["model_name"] if parsed else None,
        "processors": parsed["processors"] if parsed else None,
        "flags": {name: (None if flags is None else name in flags) for name in CPU_FLAGS},
    }


def _read_param(reader, module_dir, name):
    rel = "%s/parameters/%s" % (module_dir, name)
    text = reader.read(rel)
    if text is None:
        return None
    value, problem = parse_sysfs_bool(text)
    if problem:
        reader.warn(reader.path(rel), problem)
    return value


def read_kvm(reader):
    intel_loaded = reader.isdir(KVM_INTEL_DIR)
    amd_loaded = reader.isdir(KVM_AMD_DIR)
    intel = {"loaded": intel_loaded, "tdx": None}
    if intel_loaded:
        intel["tdx"] = _read_param(reader, KVM_INTEL_DIR, "tdx")
    amd = {"loaded": amd_loaded}
    for name in KVM_AMD_PARAMS:
        amd[name] = _read_param(reader, KVM_AMD_DIR, name) if amd_loaded else None
    return {"intel": intel, "amd": amd}


def read_cmdline(reader):
    text = reader.read(CMDLINE, expected=True)
    return cmdline_facts(parse_cmdline(text) if text is not None else {}, readable=text is not None)


def read_iommu(reader, cmdline):
    entries = reader.listdir(IOMMU_GROUPS)
    groups = None if entries is None else sum(1 for name in entries if name.isdigit())
    return {
        "groups": groups,
        "enabled": None if groups is None else groups > 0,
        "cmdline_intel_iommu_on": cmdline["intel_iommu_on"],
        "cmdline_iommu_pt": cmdline["iommu_pt"],
        "cmdline_iommu_off": cmdline["iommu_off"],
    }


def read_qgs(reader):
    result = reader.stat(QGS_SOCKET)
    present = None if result is None else result is not False
    return {
        "path": "/" + QGS_SOCKET,
        "present": present,
        "is_socket": None if result is None else bool(result) and stat.S_ISSOCK(result.st_mode),
    }


def read_devices(reader):
    return {
        "sev": reader.exists(DEV_SEV),
        "sgx_enclave": reader.exists(DEV_SGX_ENCLAVE),
        "sgx_provision": reader.exists(DEV_SGX_PROVISION),
        "vhost_vsock": reader.exists(DEV_VHOST_VSOCK),
        "vsock": reader.exists(DEV_VSOCK),
    }


# ---------------------------------------------------------------------------------------------------
# Readiness summaries (pure: dicts in, dicts out)
# ---------------------------------------------------------------------------------------------------


def _older_than(kernel, since):
    version = kernel.get("version")
    return version is not None and tuple(version[:2]) < since


def summarize_tdx(cpu, kvm, cmdline, kernel, qgs):
    supported = cpu["flags"]["tdx_host_platform"]
    param = kvm["intel"]["tdx"]
    enabled = param is True
    cmdline_ready = cmdline["kvm_intel_tdx"] is True and cmdline["nohibernate"]
    ready = supported is True and enabled
    reasons = []
    advice = []
    if cpu["vendor"] not in (None, "GenuineIntel"):
        # The kvm_intel and cmdline details below would only be noise on another vendor's CPU.
        reasons.append("TDX needs an Intel Xeon host; this CPU's vendor is %s" % cpu["vendor"])
        return _tdx_result(supported, enabled, cmdline_ready, qgs, reasons, [])
    if supported is None:
        reasons.append("cannot tell whether the CPU supports TDX: /proc/cpuinfo could not be read")
    elif not supported:
        if cpu["flags"]["hypervisor"]:
            reasons.append(
                "CPU flag tdx_host_platform absent and this is a virtual machine (hypervisor flag): "
                "a TDX host must run on bare metal"
            )
        else:
            why = (
                "CPU flag tdx_host_platform absent from /proc/cpuinfo: the kernel did not initialise "
                "TDX. Enable TME, TME-MT with a TDX key split and TDX (SEAM loader) in the BIOS, boot a "
                "kernel with CONFIG_INTEL_TDX_HOST, and check `dmesg | grep virt/tdx`"
            )
            if not cmdline["nohibernate"]:
                why += "; nohibernate is not on the command line, and the kernel refuses TDX while "
                why += "hibernation is possible: add nohibernate and reboot"
            reasons.append(why)
    if not enabled:
        if kvm["intel"]["loaded"] is False:
            reasons.append(
                "kvm_intel is not loaded (no /sys/module/kvm_intel): load it with `modprobe kvm_intel tdx=1`"
            )
        elif param is None and kvm["intel"]["loaded"]:
            why = "/sys/module/kvm_intel/parameters/tdx is missing or unreadable: this kernel's KVM has "
            why += "no TDX support"
            if _older_than(kernel, KVM_TDX_SINCE):
                why += " (kernel %s predates upstream KVM TDX in %s; use %s+ or a vendor TDX kernel)" % (
                    kernel["release"],
                    _version_tuple_text(KVM_TDX_SINCE),
                    _version_tuple_text(KVM_TDX_SINCE),
                )
            reasons.append(why)
        elif param is False:
            if cmdline["kvm_intel_tdx"] is True:
                reasons.append(
                    "kvm_intel tdx parameter is N although kvm_intel.tdx=1 is on the command line: KVM "
                    "could not set up TDX; check `dmesg | grep -i tdx`"
                )
            else:
                reasons.append(
                    "kvm_intel tdx parameter is N: add kvm_intel.tdx=1 to the kernel command line (or "
                    "`options kvm_intel tdx=1` in /etc/modprobe.d/) and reboot"
                )
    if ready and not cmdline_ready:
        missing = [
            token
            for token, present in (
                ("kvm_intel.tdx=1", cmdline["kvm_intel_tdx"] is True),
                ("nohibernate", cmdline["nohibernate"]),
            )
            if not present
        ]
        advice.append(
            "TDX works now but %s is not on the kernel command line: make it persistent" % " and ".join(missing)
        )
    if ready and not qgs["is_socket"]:
        advice.append(
            "no Quote Generation Service socket at %s: TDs launch but cannot get attestation quotes; "
            "install and start qgsd (Intel DCAP)" % qgs["path"]
        )
    return _tdx_result(supported, enabled, cmdline_ready, qgs, reasons, advice)


def _tdx_result(supported, enabled, cmdline_ready, qgs, reasons, advice):
    return {
        "supported": supported,
        "enabled": enabled,
        "cmdline_ready": cmdline_ready,
        "attestation_ready": bool(qgs["is_socket"]),
        "ready": supported is True and enabled,
        "reasons": reasons,
        "advice": advice,
    }


_SEV_KINDS = (
    # (summary name, CPU flag, kvm_amd parameter, command-line key, label)
    ("sev", "sev", "sev", "kvm_amd_sev", "SEV"),
    ("sev_es", "sev_es", "sev_es", "kvm_amd_sev_es", "SEV-ES"),
    ("snp", "sev_snp", "sev_snp", "kvm_amd_sev_snp", "SEV-SNP"),
)


def _summarize_sev_kind(kind, cpu, kvm, cmdline, kernel, devices):
    name, flag, param_name, cmd_key, label = kind
    supported = cpu["flags"][flag]
    param = kvm["amd"][param_name]
    enabled = param is True
    disabled_on_cmdline = cmdline[cmd_key] is False
    # kvm_amd enables SEV, SEV-ES and (since 6.11) SNP by default: only an explicit "=0" blocks it, and
    # SNP additionally needs the IOMMU, which the kernel refuses to give up when SNP is in use.
    cmdline_ready = not disabled_on_cmdline and not (name == "snp" and cmdline["iommu_off"])
    reasons = []
    if cpu["vendor"] not in (None, "AuthenticAMD"):
        reasons.append("%s needs an AMD EPYC host; this CPU's vendor is %s" % (label, cpu["vendor"]))
        return _sev_result(supported, enabled, cmdline_ready, devices, reasons)
    if supported is None:
        reasons.append("cannot tell whether the CPU supports %s: /proc/cpuinfo could not be read" % label)
    elif not supported:
        reasons.append(
            "CPU flag %s absent from /proc/cpuinfo: the CPU or BIOS does not offer %s (enable SME/SEV, "
            "SEV-ES ASIDs%s in the BIOS)" % (flag, label, " and SNP with RMP table" if name == "snp" else "")
        )
    if not enabled:
        if kvm["amd"]["loaded"] is False:
            reasons.append("kvm_amd is not loaded (no /sys/module/kvm_amd): load it with `modprobe kvm_amd`")
        elif param is None and kvm["amd"]["loaded"]:
            why = "/sys/module/kvm_amd/parameters/%s is missing or unreadable: " % param_name
            why += "this kernel's KVM has no %s" % label
            if name == "snp" and _older_than(kernel, KVM_SNP_SINCE):
                why += " (kernel %s predates upstream SNP host support in %s)" % (
                    kernel["release"],
                    _version_tuple_text(KVM_SNP_SINCE),
                )
            reasons.append(why)
        elif param is False:
            if disabled_on_cmdline:
                reasons.append(
                    "kvm_amd.%s is disabled on the kernel command line: remove it or set "
                    "kvm_amd.%s=1 and reboot" % (param_name, param_name)
                )
            else:
                reasons.append(
                    "kvm_amd %s parameter is N: KVM could not enable %s; check `dmesg | grep -i sev`"
                    % (param_name, label)
                )
    if name != "sev" and enabled and kvm["amd"]["sev"] is not True:
        reasons.append("%s needs SEV itself enabled in kvm_amd (sev parameter is not Y)" % label)
    if name == "snp" and cmdline["iommu_off"]:
        reasons.append("the IOMMU is disabled on the command line: SEV-SNP requires it; remove iommu=off")
    if devices["sev"] is False:
        reasons.append(
            "/dev/sev is missing: load the ccp driver (`modprobe ccp`) or, in a container, mount the "
            "host's /dev/sev; QEMU needs it to launch %s guests" % label
        )
    return _sev_result(supported, enabled, cmdline_ready, devices, reasons)


def _sev_result(supported, enabled, cmdline_ready, devices, reasons):
    return {
        "supported": supported,
        "enabled": enabled,
        "cmdline_ready": cmdline_ready,
        "device": devices["sev"],
        "ready": supported is True and enabled and not reasons,
        "reasons": reasons,
    }


def summarize_sev(cpu, kvm, cmdline, kernel, devices):
    """``{"sev": ..., "sev_es": ..., "snp": ...}``; SNP guests charge the ``sev_es`` misc resource."""
    return {kind[0]: _summarize_sev_kind(kind, cpu, kvm, cmdline, kernel, devices) for kind in _SEV_KINDS}


def summarize_sgx(cpu, devices):
    supported = cpu["flags"]["sgx"]
    reasons = []
    if supported is None:
        reasons.append("cannot tell whether the CPU supports SGX: /proc/cpuinfo could not be read")
    elif not supported:
        reasons.append("CPU flag sgx absent: enable SGX in the BIOS (TDX attestation needs it for the QE)")
    if supported and not cpu["flags"]["sgx_lc"]:
        reasons.append("CPU flag sgx_lc absent: the in-kernel SGX driver needs Flexible Launch Control")
    if supported and devices["sgx_enclave"] is False:
        reasons.append("/dev/sgx_enclave missing: the kernel's SGX driver did not start (dmesg | grep sgx)")
    return {
        "supported": supported,
        "flexible_launch_control": cpu["flags"]["sgx_lc"],
        "enclave_device": devices["sgx_enclave"],
        "provision_device": devices["sgx_provision"],
        "ready": supported is True and not reasons,
        "reasons": reasons,
    }


# ---------------------------------------------------------------------------------------------------
# GPU confidential computing through nvidia-smi
# ---------------------------------------------------------------------------------------------------

GPU_COMMANDS = (
    ("conf_compute_query", ("conf-compute", "-q")),
    ("conf_compute_features", ("conf-compute", "-f")),
    ("ready_state", ("conf-compute", "-grs")),
    ("query", ("-q",)),
)
_NO_CC_DEVICE = "no cc capable"


def empty_gpu(reason=None):
    """The ``gpu`` fact when nvidia-smi was not run."""
    return {
        "probed": False,
        "nvidia_smi": None,
        "present": None,
        "driver_version": None,
        "cuda_version": None,
        "cc_capable": None,
        "cc_state": None,
        "cc_enabled": None,
        "devtools": None,
        "cc_features": {},
        "cpu_cc_capabilities": None,
        "multi_gpu_mode": None,
        "ready_state": None,
        "ready": False,
        "gpus": [],
        "reasons": [reason] if reason else [],
    }


def summarize_gpu(nvidia_smi, outputs):
    """The ``gpu`` fact from nvidia-smi results.

    ``outputs`` maps each :data:`GPU_COMMANDS` name to ``(rc, stdout, stderr)`` (missing: not run).
    Returns ``(gpu, warnings)``; a failed, timed-out or unparsable command is a warning, never an error.
    """
    gpu = empty_gpu()
    gpu["probed"] = True
    gpu["nvidia_smi"] = nvidia_smi
    warnings = []

    def command_text(name):
        argv = dict(GPU_COMMANDS)[name]
        return "%s %s" % (nvidia_smi, " ".join(argv))

    def ok_output(name):
        result = outputs.get(name)
        if result is None:
            return None
        rc, out, err = result
        out, err = _text(out), _text(err)
        if _NO_CC_DEVICE in (out + err).lower():
            # nvidia-smi exits 6 on GPUs without CC support: that is an answer, not a failure.
            gpu["cc_capable"] = False
            return None
        if rc != 0:
            detail = (err.strip() or out.strip() or "no output").splitlines()[0][:200]
            if rc in (124, 137, -9):
                detail = "timed out (%s)" % detail
            warnings.append({"path": command_text(name), "problem": "exit code %s: %s" % (rc, detail)})
            return None
        return out

    query = ok_output("query")
    if query is not None:
        parsed = parse_nvidia_smi_query(query)
        if parsed is None:
            warnings.append({"path": command_text("query"), "problem": "output is not an nvidia-smi log"})
        else:
            gpu["driver_version"] = parsed["driver_version"]
            gpu["cuda_version"] = parsed["cuda_version"]
            gpu["gpus"] = parsed["gpus"]
            gpu["present"] = bool(parsed["gpus"]) or bool(parsed["attached_gpus"])

    conf = ok_output("conf_compute_query")
    if conf is not None:
        parsed = parse_conf_compute_query(conf)
        if parsed is None:
            warnings.append({"path": command_text("conf_compute_query"), "problem": "no CC fields in the output"})
        else:
            gpu["cc_state"] = parsed["cc_state"]
            gpu["cc_enabled"] = _on_off(parsed["cc_state"])
            gpu["cpu_cc_capabilities"] = parsed["cpu_cc_capabilities"]
            gpu["multi_gpu_mode"] = parsed["multi_gpu_mode"]
            gpu["cc_capable"] = _capable(parsed["gpu_cc_capabilities"])
            gpu["ready_state"] = _normalise_ready(parsed["ready_state"])

    features = ok_output("conf_compute_features")
    if features is not None:
        gpu["cc_features"] = parse_conf_compute_features(features)
        status = gpu["cc_features"].get("cc_status")
        if gpu["cc_enabled"] is None and status is not None:
            gpu["cc_state"] = status
            gpu["cc_enabled"] = _on_off(status)
        if not gpu["cc_features"]:
            warnings.append({"path": command_text("conf_compute_features"), "problem": "no CC feature lines in output"})

    ready_out = ok_output("ready_state")
    if ready_out is not None:
        state = parse_ready_state(ready_out)
        if state is None:
            warnings.append({"path": command_text("ready_state"), "problem": "no GPUs ready state in output"})
        else:
            gpu["ready_state"] = state

    if gpu["cc_state"] is not None:
        gpu["devtools"] = "devtools" in gpu["cc_state"].lower() or any(
            "devtools" in key and _on_off(value) for key, value in gpu["cc_features"].items()
        )
    if gpu["present"] is None and (gpu["cc_state"] is not None or gpu["cc_capable"] is not None):
        gpu["present"] = True
    gpu["ready"] = gpu["cc_enabled"] is True and gpu["ready_state"] == "ready" and not gpu["devtools"]
    reasons = gpu["reasons"]
    if gpu["present"] is False:
        reasons.append("nvidia-smi lists no GPU")
    elif gpu["cc_capable"] is False:
        reasons.append("the GPU does not support confidential computing (Hopper or newer is needed)")
    elif gpu["cc_enabled"] is False:
        reasons.append(
            "GPU CC mode is off (CC state %s): switch it on with NVIDIA's gpu-admin-tools "
            "(`nvidia_gpu_tools.py --set-cc-mode=on --reset-after-cc-mode-switch`) on the host" % gpu["cc_state"]
        )
    elif gpu["cc_enabled"] is None:
        reasons.append("GPU CC state unknown: nvidia-smi conf-compute gave no usable answer")
    elif gpu["devtools"]:
        reasons.append(
            "GPU CC is in DevTools mode: memory is encrypted but debugging is allowed, which is not "
            "confidential; set CC mode to on (not devtools) with gpu-admin-tools"
        )
    elif gpu["ready_state"] != "ready":
        reasons.append(
            "GPU CC is on but the GPUs are %s: inside the confidential guest, attest the GPU and then run "
            "`nvidia-smi conf-compute -srs 1`" % (gpu["ready_state"] or "in an unknown ready state")
        )
    if gpu["ready"]:
        del reasons[:]
    return gpu, warnings


def probe_gpu(nvidia_smi, run, timeout=20):
    """Run every :data:`GPU_COMMANDS` through ``run(argv, timeout) -> (rc, stdout, stderr)``.

    ``run`` is ``module.run_command`` wrapped by the module, or ``subprocess`` in ``scripts/gpu_probe.sh``;
    an exception from it is reported like a failed command.
    """
    outputs = {}
    for name, argv in GPU_COMMANDS:
        try:
            outputs[name] = run([nvidia_smi, *argv], timeout)
        except Exception as exc:  # a runner must never take the whole fact gathering down
            outputs[name] = (1, "", "could not run: %s" % exc)
    return summarize_gpu(nvidia_smi, outputs)


# ---------------------------------------------------------------------------------------------------
# Everything together
# ---------------------------------------------------------------------------------------------------


def gather_host_facts(host_root="/", gpu=None):
    """All host facts under ``host_root``.

    ``gpu`` is a ``(gpu_fact, warnings)`` pair from :func:`probe_gpu` (or ``None``: not probed). Raises
    :class:`HostRootError` only when ``host_root`` is not a directory.
    """
    if not os.path.isdir(host_root):
        raise HostRootError(
            "host_root %r is not a directory: point it at the host's root (/ or the DaemonSet's "
            "host mount such as /host, or a simulated node tree)" % host_root
        )
    reader = HostReader(host_root)
    kernel = read_kernel(reader)
    cpu = read_cpu(reader)
    kvm = read_kvm(reader)
    cmdline = read_cmdline(reader)
    devices = read_devices(reader)
    iommu = read_iommu(reader, cmdline)
    qgs = read_qgs(reader)
    facts = {
        "host_root": host_root,
        "kernel": kernel,
        "cpu": cpu,
        "kvm": kvm,
        "cmdline": cmdline,
        "devices": devices,
        "iommu": iommu,
        "vsock": {"vhost_vsock": devices["vhost_vsock"], "vsock": devices["vsock"]},
        "qgs": qgs,
        "tdx": summarize_tdx(cpu, kvm, cmdline, kernel, qgs),
        "sgx": summarize_sgx(cpu, devices),
    }
    facts.update(summarize_sev(cpu, kvm, cmdline, kernel, devices))
    warnings = reader.warnings
    if gpu is None:
        facts["gpu"] = empty_gpu()
    else:
        facts["gpu"], gpu_warnings = gpu
        warnings = warnings + list(gpu_warnings)
    facts["warnings"] = warnings
    return facts
