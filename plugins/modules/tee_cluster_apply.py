#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tee_cluster_apply
short_description: Apply, patch or delete Kubernetes objects in one call, all or nothing, writing only what differs
version_added: 0.1.0
description:
  - Reads the live objects first (one LIST per kind and namespace when several objects share it, a GET otherwise)
    and compares them with O(objects); only objects that differ are sent. A run that changes nothing sends no
    write request, not even a dry run.
  - "C(present): server-side apply by O(field_manager). An object is unchanged when O(field_manager) already
    applied it at the same apiVersion, the live object has every field of O(objects) with that value, and the
    manager owns no field that O(objects) no longer sets (the apply would remove it)."
  - "C(patched): a JSON merge patch (RFC 7396) of objects another owner created (KubeVirt, Node); unchanged when
    the patch would leave the live object as it is. An object that does not exist is refused."
  - "C(absent): delete; unchanged when the object does not exist."
  - "All or nothing: every object that differs is first sent as a server-side dry run; when the server refuses
    any of them (validation, admission, RBAC, a conflict with another field manager) nothing is written and the
    message names each refused object. After the writes every written object is read back and compared again."
  - Check mode and C(--diff) come from the same plan; check mode sends the dry runs and writes nothing.
  - Secrets are refused (C(confidential.tee.cluster_objects) sends them with their contents hidden).
  - Meant to run on the controller (C(delegate_to) C(localhost)).
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Reads, compares and sends a server-side dry run of each object that differs; writes nothing.
  diff_mode:
    support: full
    description: For each object that differs, the fields it sets, before (live) and after.
  platform:
    platforms: posix
options:
  objects:
    description: The objects (each with apiVersion, kind and metadata.name).
    type: list
    elements: dict
    required: true
  state:
    description: C(present) applies, C(patched) merge-patches, C(absent) deletes.
    type: str
    choices: [present, patched, absent]
    default: present
  field_manager:
    description: The server-side apply field manager (C(present)).
    type: str
    default: confidential-tee
  force_conflicts:
    description: Take fields another manager owns (C(present)).
    type: bool
    default: false
  kubeconfig:
    description: A kubeconfig file; unset, the client's default (C(KUBECONFIG), C(~/.kube/config)) or in-cluster.
    type: path
  context:
    description: The kubeconfig context; unset, its current context.
    type: str
requirements:
  - kubernetes (the Python client)
seealso:
  - module: kubernetes.core.k8s
"""

EXAMPLES = r"""
# example: skip: needs a cluster (tests/live/test_cluster_apply_live.py runs it against a real API server)
- name: Apply the RuntimeClasses, writing only those that differ
  confidential.tee.tee_cluster_apply:
    objects: "{{ runtimeclasses }}"
    kubeconfig: ~/.kube/config
  delegate_to: localhost
"""

RETURN = r"""
changes:
  description:
    - What changed, in the shape every module of this collection returns (docs/modules.md, result vocabulary).
    - C(written) (objects created, updated or patched) and C(removed) (objects deleted), by C(Kind/namespace/name)
      (C(Kind/name) for cluster-scoped ones; in check mode what would be), C(hidden), C(commands) and C(backups)
      (0 and empty here), and C(entries) (each object with C(name), C(changed) and C(reasons), the action,
      C(create), C(update), C(patch), C(delete) or C(unchanged)).
  returned: always
  type: dict
  sample: {"written": ["RuntimeClass/kata-qemu-tdx"], "removed": [], "hidden": 0, "commands": [], "backups": [],
           "entries": [{"name": "RuntimeClass/kata-qemu-tdx", "changed": true, "reasons": ["create"]}]}
objects:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.entries) (C(name) and C(reasons) instead of C(ref) and
      C(action)).
    - Each object and what happened to it (create, update, patch, delete or unchanged).
  returned: always
  type: list
  elements: dict
  sample: [{ref: RuntimeClass/kata-qemu-tdx, action: unchanged}]
writes:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.written) and C(changes.removed), the requests sent
      (none in check mode).
    - The write requests sent (dry runs not counted; 0 when nothing differed).
  returned: always
  type: int
"""

import json

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.confidential.tee.plugins.module_utils.cluster.apply_plan import (
    STATES,
    Step,
    input_errors,
    object_ref,
    plan_step,
    projection,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.results import change_summary

try:
    from kubernetes import config as kube_config
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError
except ImportError:  # pragma: no cover - reported by the module
    kube_config = None


class ApplyError(Exception):
    """A refusal or failure; the message names the objects and says what was written."""


def _reason(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    try:
        return json.loads(body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}".strip()


def connect(kubeconfig: str | None, context: str | None) -> DynamicClient:
    if kubeconfig or context:
        return DynamicClient(kube_config.new_client_from_config(config_file=kubeconfig, context=context))
    try:
        kube_config.load_kube_config()
    except kube_config.ConfigException:
        kube_config.load_incluster_config()
    return DynamicClient(ApiClient())


class Cluster:
    """The API calls of one run: reads grouped by kind, dry runs, writes, read-back."""

    def __init__(self, client: DynamicClient, state: str, manager: str, force: bool):
        self.client, self.state, self.manager, self.force = client, state, manager, force
        self.resources: dict = {}

    def resource(self, obj: dict):
        key = (obj["apiVersion"], obj["kind"])
        if key not in self.resources:
            try:
                self.resources[key] = self.client.resources.get(api_version=key[0], kind=key[1])
            except ResourceNotFoundError:
                raise ApplyError(
                    f"{object_ref(obj)}: the API server does not serve {key[1]} of {key[0]} (is its CRD installed?); "
                    "nothing was changed"
                ) from None
        return self.resources[key]

    def read(self, objects: list) -> dict:
        """The live objects by reference (absent ones left out): one LIST per kind and namespace shared by several."""
        groups: dict = {}
        for obj in objects:
            groups.setdefault((obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace")), []).append(obj)
        live = {}
        for (_version, _kind, namespace), members in groups.items():
            resource = self.resource(members[0])
            ns = namespace if resource.namespaced else None
            if len(members) > 1:
                listed = self.client.get(resource, namespace=ns).to_dict().get("items") or []
                by_name = {item["metadata"]["name"]: item for item in listed}
                for obj in members:
                    if obj["metadata"]["name"] in by_name:
                        live[object_ref(obj)] = by_name[obj["metadata"]["name"]]
                continue
            try:
                name = members[0]["metadata"]["name"]
                live[object_ref(members[0])] = self.client.get(resource, name=name, namespace=ns).to_dict()
            except ApiException as exc:
                if exc.status != 404:
                    raise ApplyError(f"{object_ref(members[0])}: reading it failed: {_reason(exc)}") from None
        return live

    def send(self, step: Step, dry_run: bool) -> None:
        resource = self.resource(step.obj)
        meta = step.obj["metadata"]
        ns = meta.get("namespace") if resource.namespaced else None
        extra = {"dry_run": "All"} if dry_run else {}
        if step.action in ("create", "update"):
            self.client.server_side_apply(
                resource,
                body=step.obj,
                name=meta["name"],
                namespace=ns,
                field_manager=self.manager,
                force_conflicts=self.force,
                **extra,
            )
        elif step.action == "patch":
            self.client.patch(
                resource,
                body=step.obj,
                name=meta["name"],
                namespace=ns,
                content_type="application/merge-patch+json",
                **extra,
            )
        elif step.action == "delete":
            self.client.delete(resource, name=meta["name"], namespace=ns, **extra)

    def plan(self, objects: list) -> list[Step]:
        live = self.read(objects)
        steps = [plan_step(obj, live.get(object_ref(obj)), self.state, self.manager) for obj in objects]
        missing = [s.ref for s in steps if s.action == "missing"]
        if missing:
            raise ApplyError(
                f"{', '.join(missing)} not found: these objects are merge-patched (another owner creates them), "
                "never created; nothing was changed"
            )
        return steps

    def dry_run(self, steps: list[Step]) -> None:
        refused = []
        # An object in a Namespace this same call creates cannot be dry-run before the Namespace exists (the server
        # answers "namespace not found"): it is checked by its write, after the Namespace's.
        new_namespaces = {s.obj["metadata"]["name"] for s in steps if s.obj["kind"] == "Namespace" and s.live is None}
        for step in steps:
            if step.obj["metadata"].get("namespace") in new_namespaces:
                continue
            try:
                self.send(step, dry_run=True)
            except ApiException as exc:
                refused.append(f"{step.ref}: {_reason(exc)}")
        if refused:
            raise ApplyError(f"The API server refused {'; '.join(refused)}. Nothing was changed")

    def write(self, steps: list[Step]) -> None:
        done = []
        for step in steps:
            try:
                self.send(step, dry_run=False)
            except ApiException as exc:
                raise ApplyError(
                    f"{step.ref}: the API server refused the {step.action} after its dry run passed: {_reason(exc)}; "
                    f"written before it: {', '.join(done) or 'none'}; run again to finish"
                ) from None
            done.append(step.ref)

    def verify(self, steps: list[Step]) -> None:
        """Read the written objects back: each must now be as asked (deleted ones gone or being deleted)."""
        live = self.read([s.obj for s in steps])
        wrong = []
        for step in steps:
            now = live.get(step.ref)
            if step.action == "delete":
                if now is not None and not (now.get("metadata") or {}).get("deletionTimestamp"):
                    wrong.append(f"{step.ref} still exists")
            elif plan_step(step.obj, now, self.state, self.manager).writes:
                wrong.append(f"{step.ref} does not hold the fields sent (a webhook or controller changed them?)")
        if wrong:
            raise ApplyError(f"Read back after the writes: {'; '.join(wrong)}")


def _diff(step: Step) -> dict:
    before = projection(step.live, step.obj) if step.live is not None else None
    after = None if step.action == "delete" else step.obj
    return {
        "before_header": step.ref,
        "after_header": step.ref,
        "before": json.dumps(before, indent=2, sort_keys=True) + "\n" if before is not None else "",
        "after": json.dumps(after, indent=2, sort_keys=True) + "\n" if after is not None else "",
    }


def run(module: AnsibleModule, cluster: Cluster, objects: list) -> dict:
    steps = cluster.plan(objects)
    changing = [s for s in steps if s.writes]
    if changing:
        cluster.dry_run(changing)
        if not module.check_mode:
            cluster.write(changing)
            cluster.verify(changing)
    entries = [{"name": s.ref, "changed": bool(s.writes), "reasons": [s.action]} for s in steps]
    result = {
        "changed": bool(changing),
        "changes": change_summary(entries, removed=[s.ref for s in changing if s.action == "delete"]),
        "objects": [{"ref": s.ref, "action": s.action} for s in steps],
        "writes": 0 if module.check_mode else len(changing),
    }
    if module._diff and changing:
        result["diff"] = [_diff(s) for s in changing]
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "objects": {"type": "list", "elements": "dict", "required": True},
            "state": {"type": "str", "choices": list(STATES), "default": "present"},
            "field_manager": {"type": "str", "default": "confidential-tee"},
            "force_conflicts": {"type": "bool", "default": False},
            "kubeconfig": {"type": "path"},
            "context": {"type": "str"},
        },
        supports_check_mode=True,
    )
    if kube_config is None:
        module.fail_json(msg=missing_required_lib("kubernetes"))
    params = module.params
    objects = params["objects"]
    errors = input_errors(objects, params["state"])
    errors += [
        f"{object_ref(o)}: Secrets are not sent by this module"
        for o in objects
        if isinstance(o, dict) and o.get("kind") == "Secret"
    ]
    if errors:
        module.fail_json(msg=f"Objects: {'; '.join(errors)}. Nothing was changed.")
    try:
        client = connect(params["kubeconfig"], params["context"])
        cluster = Cluster(client, params["state"], params["field_manager"], params["force_conflicts"])
        module.exit_json(**run(module, cluster, objects))
    except ApplyError as exc:
        module.fail_json(msg=f"{exc}.")
    except (ApiException, kube_config.ConfigException, OSError) as exc:
        module.fail_json(msg=f"The Kubernetes API could not be used: {_reason(exc)}. Nothing was changed.")


if __name__ == "__main__":
    main()
