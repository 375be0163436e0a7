"""The live tests' Kubernetes cluster: a real control plane per test process, or the one TEE_LIVE_KUBECONFIG names.

Here (and in CI) ``live_cluster`` starts etcd and kube-apiserver built by ``make k8s`` (scripts/build_k8s.py)
with real TLS, RBAC and admission (scripts/kube_control_plane.py), installs NFD's, MachineConfig's and
KataConfig's CRDs from ``../shared/reference/crds`` (KubeVirt's and HCO's are installed by the tests that need
them, for their test alone), and removes it all when the session ends, also after a failure. Each test then gets
``live``: the same cluster, with everything the test created removed afterwards.

With ``TEE_LIVE_KUBECONFIG=<file>`` (and optionally ``TEE_LIVE_CONTEXT``) the tests run against that cluster
instead. There they only write the objects the collection owns (its NodeFeatureRule and RuntimeClasses), refuse
to start when one of those already exists (they never change or delete what they did not create), and skip
the tests that need to register Nodes, install CRDs or plant foreign objects, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from teesim.fixtures import k8s_objects

REPO_ROOT = Path(__file__).resolve().parents[2]
# A test file written but not yet green against the built control plane goes here until it is (none now).
collect_ignore = []
CLUSTER_PLAYBOOK = REPO_ROOT / "playbooks" / "cluster.yml"
RULE = "confidential-tee-keys"
# The simulated nodes: vendor for their teesim host tree, address and the labels NFD would have put on them.
NODES = {
    "tdx-1": ("intel", "10.0.0.11", {"intel.feature.node.kubernetes.io/tdx": "true"}),
    "snp-1": ("amd", "10.0.0.12", {"amd.feature.node.kubernetes.io/snp": "true"}),
}
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE")
CRD_FILES = {"nfd": "nfd-api-crds.yaml", "kataconfig": "kataconfigs.yaml", "machineconfig": "machineconfigs.yaml"}


@dataclass
class LiveCluster:
    """A cluster the live tests may write to; ``private`` when this session started it."""

    kubeconfig: Path
    kubectl_bin: str
    private: bool
    context: str | None = None
    limited_kubeconfig: Path | None = None
    plane: object | None = None
    crd_files: dict[str, Path] = field(default_factory=dict)

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None, check: bool = True):
        command = [self.kubectl_bin, f"--kubeconfig={kubeconfig or self.kubeconfig}"]
        if self.context and kubeconfig is None:
            command.append(f"--context={self.context}")
        done = subprocess.run([*command, *args], input=input, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def get(self, resource: str, name: str | None = None, namespace: str | None = None) -> dict | None:
        """The object (or the list) as the server has it, managedFields included; ``None`` when it does not exist."""
        # kubectl leaves managedFields out of -o json unless asked (since 1.21): the field managers are how the
        # tests tell the collection's objects from anyone else's.
        args = ["get", resource, *([name] if name else []), "-o", "json", "--show-managed-fields"]
        args += ["-n", namespace] if namespace else []
        done = self.kubectl(*args, check=False)
        if done.returncode != 0:
            if "NotFound" in done.stderr:
                return None
            raise AssertionError(f"kubectl get {resource} {name}: {done.stderr.strip()}")
        return json.loads(done.stdout)

    def require_private(self, why: str) -> None:
        if not self.private:
            pytest.skip(
                f"TEE_LIVE_KUBECONFIG names someone's cluster: this test {why}, which the live tests never do there"
            )

    def apply(self, objects: list[dict], manager: str = "tee-live-test", force: bool = False) -> None:
        """Create or change objects as another tool would (private clusters only: see require_private)."""
        self.require_private("writes objects the collection does not own")
        args = ["apply", "--server-side", f"--field-manager={manager}", "-f", "-"]
        self.kubectl(
            *args,
            *(["--force-conflicts"] if force else []),
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )

    def deny(self, name: str, rule: dict, validation: dict) -> None:
        """An admission policy (ValidatingAdmissionPolicy and its Deny binding) refusing CREATE and UPDATE of the
        resources in ``rule`` (apiGroups, resources) unless ``validation`` (expression, message) holds."""
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [{"apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], **rule}]
                },
                "validations": [validation],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }
        self.apply([policy, binding])

    def wait_until_refused(self, obj: dict, timeout: float = 60) -> str:
        """Dry-run ``obj`` until the server refuses it (an admission policy takes a moment to load); the refusal."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            args = ["apply", "--server-side", "--dry-run=server", "--field-manager=tee-live-probe", "-f", "-"]
            done = self.kubectl(*args, input=json.dumps(obj), check=False)
            if done.returncode != 0:
                return done.stderr
            time.sleep(0.5)
        raise AssertionError(f"the server still accepts {obj['kind']}/{obj['metadata']['name']} after {timeout:.0f} s")

    def write_requests(self) -> Counter:
        """The write requests the API server has counted (``apiserver_request_total`` of its /metrics), dry runs
        included, by ``verb resource``; the server's own lease renewals left out. Private clusters only."""
        self.require_private("counts the API server's write requests (other clients write to someone's cluster)")
        counts: Counter = Counter()
        for line in self.kubectl("get", "--raw", "/metrics").stdout.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("verb") in WRITE_VERBS and labels.get("resource") != "leases":
                dry = " (dry run)" if labels.get("dry_run") else ""
                counts[f"{labels['verb']}{dry} {labels.get('resource')}"] += int(float(line.rsplit(" ", 1)[1]))
        return counts

    def install_crd(self, crd: dict) -> None:
        """Install a CRD (private clusters only) and wait until the server serves it."""
        self.apply([crd], manager="tee-live-setup")
        self.plane.wait_established(crd["metadata"]["name"])

    def register_simulated_nodes(self) -> None:
        """The simulated nodes' Node objects as their kubelets would have registered them, status included."""
        if not self.private:  # a real cluster's kubelets own its Nodes; the objects applied do not need them
            return
        nodes = [
            k8s_objects.node(name, address, labels, {}, "6.16.0", "Debian GNU/Linux 13 (trixie)")
            for name, (_vendor, address, labels) in NODES.items()
        ]
        self.plane.load_objects(nodes)

    def versions(self) -> dict[str, str]:
        """Every object of the WATCHED kinds by kind/name, with the resourceVersion the server gave its last write."""
        versions = {}
        for resource in WATCHED:
            for item in self.get(resource)["items"]:
                versions[f"{resource}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
        return versions

    def collection_objects(self) -> dict[str, dict]:
        """The objects confidential.tee manages now (field manager confidential-tee), by kind/name."""
        found = {}
        for resource in COLLECTION_KINDS:
            for item in (self.get(resource) or {"items": []})["items"]:
                if any(m.get("manager") == FIELD_MANAGER for m in item["metadata"].get("managedFields", [])):
                    found[f"{item['kind']}/{item['metadata']['name']}"] = item
        return found


# The cluster-scoped kinds the cluster playbook applies (names vary with the plan).
COLLECTION_KINDS = ("nodefeaturerules.nfd.k8s-sigs.io", "runtimeclasses.node.k8s.io")
# The kinds whose objects a cluster has whoever runs it: a run on "someone's cluster" must leave each as it found it.
WATCHED = (
    "nodes",
    "namespaces",
    "customresourcedefinitions.apiextensions.k8s.io",
    *COLLECTION_KINDS,
)
FIELD_MANAGER = "confidential-tee"


def _names(cluster: LiveCluster, resource: str) -> set[str]:
    listing = cluster.get(resource) or {"items": []}
    return {item["metadata"]["name"] for item in listing["items"]}


def _private_cluster(crd_files: dict[str, Path]):
    from kube_control_plane import ControlPlane

    plane = ControlPlane()
    plane.start()
    try:
        plane.install_crds(*crd_files.values())
    except BaseException:
        plane.stop()
        raise
    return plane


def external_cluster(environ: Mapping[str, str]) -> LiveCluster | None:
    """The cluster ``TEE_LIVE_KUBECONFIG`` (and ``TEE_LIVE_CONTEXT``) of ``environ`` name, ``None`` when unset.

    Fails (``pytest.fail``) when it already holds objects of confidential.tee: the tests would change them, and
    their clean-up could not tell them from their own.
    """
    external = environ.get("TEE_LIVE_KUBECONFIG")
    if not external:
        return None
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        from kube_control_plane import k8s_bin_dir

        kubectl = str(k8s_bin_dir() / "kubectl")
    cluster = LiveCluster(Path(external), kubectl, private=False, context=environ.get("TEE_LIVE_CONTEXT") or None)
    present = sorted(cluster.collection_objects())
    if present:
        pytest.fail(
            f"TEE_LIVE_KUBECONFIG={external}: the cluster already holds objects of confidential.tee "
            f"({', '.join(present)}); the live tests never change or delete what they did not create. "
            "Use a cluster without them.",
            pytrace=False,
        )
    return cluster


@pytest.fixture(scope="session")
def live_cluster(optional_reference):
    external = external_cluster(os.environ)
    if external is not None:
        yield external
        return
    reference = optional_reference
    if reference is None:
        pytest.skip("../shared/reference (NFD's CRDs) is not beside this checkout")
    crd_files = {name: reference / "crds" / file for name, file in CRD_FILES.items()}
    plane = _private_cluster(crd_files)
    try:
        yield LiveCluster(
            plane.admin_kubeconfig,
            str(plane.bin_dir / "kubectl"),
            private=True,
            limited_kubeconfig=plane.limited_kubeconfig,
            plane=plane,
            crd_files=crd_files,
        )
    finally:
        plane.stop()


@contextmanager
def cleaned_up(cluster: LiveCluster) -> Iterator[LiveCluster]:
    """The cluster, as it was before afterwards (also after a failure): what was made inside is deleted.

    Private: everything of the kinds the tests create. Someone else's cluster: only the collection's objects
    (field manager confidential-tee) that did not exist before.
    """
    before = {kind: _names(cluster, kind) for kind in COLLECTION_KINDS}
    try:
        yield cluster
    finally:
        if cluster.private:
            kinds = ",".join(
                [*COLLECTION_KINDS, "nodes", "validatingadmissionpolicies", "validatingadmissionpolicybindings"]
            )
            cluster.kubectl("delete", kinds, "--all", "--wait=true", "--timeout=60s")
        else:
            for kind in COLLECTION_KINDS:
                for name in sorted(_names(cluster, kind) - before[kind]):
                    managers = {m.get("manager") for m in cluster.get(kind, name)["metadata"].get("managedFields", [])}
                    if FIELD_MANAGER in managers:
                        cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=true", "--timeout=60s")


@pytest.fixture
def live(live_cluster: LiveCluster):
    """The cluster, as it was before the test afterwards: what the test made is deleted (:func:`cleaned_up`)."""
    with cleaned_up(live_cluster):
        yield live_cluster


def _cluster_runner(tmp_path: Path, teesim_node, ansible_playbook_cli):
    """The ``cluster_run`` fixture's runner, its node trees and inventory under ``tmp_path``."""
    roots = {
        name: teesim_node(tmp_path / "nodes" / name, "--vendor", vendor)
        for name, (vendor, _address, _labels) in NODES.items()
    }

    def run(live, *args: str, kubeconfig=None, consumers=("kata",), node_vars=None, **cluster_vars):
        by_node = consumers if isinstance(consumers, dict) else dict.fromkeys(roots, consumers)
        hosts = {
            name: {
                "tee_host_root": str(root),
                "tee_node_consumers": list(by_node[name]),
                **(node_vars or {}).get(name, {}),
            }
            for name, root in roots.items()
        }
        access = {"tee_kubeconfig": str(kubeconfig or live.kubeconfig)}
        if live is not None and live.context and kubeconfig is None:
            access["tee_k8s_context"] = live.context
        inventory = {
            "all": {
                "vars": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    **access,
                    **cluster_vars,
                },
                "children": {"tee_nodes": {"hosts": hosts}},
            }
        }
        path = tmp_path / "inventory.yml"
        path.write_text(yaml.safe_dump(inventory))
        return ansible_playbook_cli(CLUSTER_PLAYBOOK, "-i", str(path), *args, env={"KUBECONFIG": "/nonexistent"})

    run.roots = roots  # the nodes' host trees, by name
    return run


@pytest.fixture
def cluster_run(tmp_path, teesim_node, ansible_playbook_cli):
    """``run(live, *args, kubeconfig=None, consumers=("kata",), node_vars=None, **cluster_vars)``: cluster.yml,
    applying.

    ``consumers``: every node's tee_node_consumers, or a dict of them by node name; ``node_vars``: more host
    variables by node name.

    The inventory holds the simulated nodes (teesim host trees).

    ``live`` may be ``None`` when ``kubeconfig`` is given. ``KUBECONFIG`` is pointed nowhere: the inventory alone
    chooses the cluster, as the collection's messages say.
    """
    return _cluster_runner(tmp_path, teesim_node, ansible_playbook_cli)


@pytest.fixture(scope="module")
def module_cluster_run(tmp_path_factory, teesim_node, ansible_playbook_cli):
    """``cluster_run`` for a module-scoped fixture: the runs a file's tests share (its node trees, one inventory)."""
    return _cluster_runner(tmp_path_factory.mktemp("cluster"), teesim_node, ansible_playbook_cli)


@pytest.fixture(scope="session")
def someones_cluster():
    """``external_cluster(environ)``: the cluster ``live_cluster`` would use for ``environ``'s
    ``TEE_LIVE_KUBECONFIG`` (None when unset; a failure when it holds the collection's objects)."""
    return external_cluster


def _as_someones_cluster(cluster: LiveCluster) -> tuple[LiveCluster, dict[str, str]]:
    """This session's cluster standing in for someone's: its Nodes registered (by its kubelets) and another tool's
    RuntimeClass in it. The view ``live_cluster`` builds from ``TEE_LIVE_KUBECONFIG`` alone, and every WATCHED
    object's resourceVersion before anything ran there (:meth:`LiveCluster.versions`)."""
    cluster.register_simulated_nodes()
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "theirs"}}
    cluster.apply([{**runtime_class, "handler": "runc"}], manager="someone-else")
    before = cluster.versions()
    view = external_cluster({"TEE_LIVE_KUBECONFIG": str(cluster.kubeconfig)})
    assert view is not None and not view.private
    return view, before


@pytest.fixture(scope="session")
def as_someones_cluster():
    """``view, versions_before = as_someones(cluster)`` (private clusters only): :func:`_as_someones_cluster`."""
    return _as_someones_cluster


@pytest.fixture(scope="session")
def cleaning_up():
    """``cleaned_up(cluster)``: the ``live`` fixture's clean-up, as a context manager."""
    return cleaned_up


FIRST_HOST_TASK = "Read TDX/SNP readiness"


def _assert_refused_first(run, *wanted: str) -> None:
    """Failed, saying each of ``wanted``, before the first task that reads a node, without a traceback."""
    assert run.returncode != 0
    for text in wanted:
        assert text in run.flat, run.stdout[-4000:]
    assert FIRST_HOST_TASK not in run.flat, "it failed after reading the nodes, not at the first task"
    assert "Traceback" not in run.stdout + run.stderr


@pytest.fixture(scope="session")
def assert_refused_first():
    """``check(run, *wanted)``: the run failed at its first task, saying each of ``wanted``, with no traceback."""
    return _assert_refused_first


def _recap_changed(stdout: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", stdout.split("PLAY RECAP", 1)[1]))


@pytest.fixture(scope="session")
def recap_changed():
    """``count(stdout)``: the changed tasks of every host in an ansible-playbook run's PLAY RECAP."""
    return _recap_changed
