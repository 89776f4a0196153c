"""Rules of what can work at run time, beside the refused FIT_CASES of tests/bad_cases.py (which
run with BAD_CASES: tests/render/test_render.py for render.py, tests/chart/test_chart_parity.py
for helm): node addresses as Python reads IPv4, the RoleBinding's accounts, the catalogue's
facts in the messages, and what can work accepted alike by both renderers."""

from __future__ import annotations

import pytest
from test_chart_parity import assert_same_workflow  # the comparison, not its tests

from chart_helpers import argo_document, documents, helm_template
from torchdag.cli import main

# --- addresses ------------------------------------------------------------------------------

def test_the_schema_and_the_catalogue_read_ipv4_alike():
    """The plan decides HCCL_IF_IP with the catalogue's pattern, the schema refuses with its own."""
    from torchdag.catalog import catalog
    from torchdag.values import load_schema

    assert load_schema()["$defs"]["ipv4"]["pattern"] == catalog()["ipv4"]


NUMERIC_CASES = ["10.30.0.2", "0.0.0.0", "255.255.255.255", "10.30.0.256", "10.30.0.02", "1.2.3", "1", "0x7f.1",
                 "01.2.3.4", "1.2.3.4.5", "300.1.1.1"]


@pytest.mark.parametrize("address", NUMERIC_CASES)
def test_a_numeric_address_is_accepted_exactly_when_python_reads_it_as_ipv4(address, tmp_path):
    """Python's ipaddress (strict: no leading zeros, four parts) is the oracle for the schema's rule."""
    import ipaddress

    from torchdag import pipeline
    from torchdag.errors import ValuesError

    try:
        ipaddress.IPv4Address(address)
        expected = True
    except ValueError:
        expected = False
    values = tmp_path / "cluster.yaml"
    values.write_text(f"name: t\nimage: i\nscript: /t.py\nnodes:\n  - {{name: a, address: '{address}'}}\n")
    try:
        pipeline.validate(pipeline.load(values))
        accepted = True
    except ValuesError:
        accepted = False
    assert accepted == expected


def test_a_valid_quad_keeps_hccl_if_ip_in_both(helm, tmp_path):
    from torchdag import pipeline

    values = tmp_path / "cluster.yaml"
    values.write_text("name: t\nimage: i\nscript: /t.py\nnodes:\n"
                      "  - {name: a, address: 10.30.0.2, nic: eth0, accelerator: ascend910}\n"
                      "  - {name: b, address: node-b.example, nic: eth0, accelerator: ascend910}\n")
    result = helm_template(helm, values)
    assert result.returncode == 0, result.stderr
    for text in (pipeline.run(values).text, result.stdout):
        workflow = argo_document(text)
        tasks = {task["name"]: task for task in workflow["spec"]["templates"][0]["dag"]["tasks"]}
        assert {p["name"]: p["value"] for p in tasks["node-0"]["arguments"]["parameters"]}["if-ip"] == "10.30.0.2"
        assert "HCCL_IF_IP" in str(workflow["spec"]["templates"])


# --- item 9: the chart's RBAC --------------------------------------------------------------

RBAC_BASE = "name: t\nimage: i\nscript: /t.py\nnodes: [{name: a}]\nrbac: {create: true}\n"


@pytest.mark.parametrize("extra, subjects", [
    ("automountServiceAccountToken: false\nexecutorServiceAccountName: argo-exec\n", ["argo-exec"]),
    ("serviceAccountName: trainer\nexecutorServiceAccountName: argo-exec\n", ["argo-exec", "trainer"]),
    ("serviceAccountName: trainer\n", ["trainer"]),
])
def test_the_role_binding_names_the_accounts_that_call_the_api(helm, extra, subjects, tmp_path):
    """Both renderers accept these with the same spec; the RoleBinding names the executor's
    account when there is one, and the pods' account while they mount a token."""
    values = tmp_path / "values.yaml"
    values.write_text(RBAC_BASE + extra, encoding="utf-8")
    assert_same_workflow(helm, values)
    result = helm_template(helm, values)
    binding = next(doc for doc in documents(result.stdout) if doc["kind"] == "RoleBinding")
    assert [subject["name"] for subject in binding["subjects"]] == subjects


def test_the_executor_account_is_rendered_with_the_token_mounted_too(tmp_path):
    """Argo reads spec.executor.serviceAccountName whatever automountServiceAccountToken says:
    an account the user names is never dropped."""
    from torchdag import pipeline

    values = tmp_path / "values.yaml"
    values.write_text(RBAC_BASE + "serviceAccountName: trainer\nexecutorServiceAccountName: argo-exec\n")
    spec = argo_document(pipeline.run(values).text)["spec"]
    assert spec["executor"] == {"serviceAccountName": "argo-exec"} and "automountServiceAccountToken" not in spec


# --- items 8 and 11: ports and timeouts ------------------------------------------------------

def test_the_messages_state_the_catalogues_facts():
    """The schema's messages write the numbers out; they must be the catalogue's."""
    from torchdag.catalog import catalog
    from torchdag.values import load_schema

    rules = {rule.get("x-rule"): rule.get("x-message") for rule in load_schema()["allOf"]}
    hccl, ports = catalog()["ports"]["hcclHost"], catalog()["ports"]
    assert f"({hccl['base']}-{hccl['base'] + hccl['count'] - 1}:" in rules["port-hccl"]
    assert f"below {ports['unprivilegedPortStart']}," in rules["port-privileged"]
    assert f"below {catalog()['hcclExecTimeout']['step']} s" in rules["hccl-exec-timeout-short"]


@pytest.mark.parametrize("extra", [
    "port: 80\ncontainerSecurity: {addCapabilities: [NET_BIND_SERVICE]}\n",  # root with the capability
    "port: 80\ncontainerSecurity: {dropAllCapabilities: false}\n",  # the runtime's default capabilities
    "port: 80\nhostNetwork: false\n",  # the pod's own network namespace: runtimes let any user bind any port
    "port: 1024\n",
    "port: 60000\n",  # no Ascend node
    "port: 60016\nnodes: [{name: a, accelerator: ascend910}]\n",
    "port: 60005\nenv: {HCCL_IF_BASE_PORT: '61000'}\nnodes: [{name: a, accelerator: ascend910}]\n",
    "timeouts: {processGroup: 68}\nnodes: [{name: a, accelerator: ascend910}]\n",
    "timeouts: {processGroup: 1}\n",  # no Ascend node: no HCCL_EXEC_TIMEOUT
    "failurePolicy: {maxRestarts: 11}\n",  # 30 s doubling: 11 restarts wait 61410 s
    "failurePolicy: {maxRestarts: 100}\ntimeouts: {workflowDeadline: null}\n",  # no deadline
])
def test_what_can_work_is_accepted_alike(helm, extra, tmp_path):
    values = tmp_path / "values.yaml"
    text = "name: t\nimage: i\nscript: /t.py\n" + extra
    values.write_text(text if "nodes:" in text else text + "nodes: [{name: a}]\n", encoding="utf-8")
    assert_same_workflow(helm, values)


def test_a_port_among_a_moved_hccl_base_is_a_warning(tmp_path, capsys):
    values = tmp_path / "values.yaml"
    values.write_text("name: t\nimage: i\nscript: /t.py\nport: 61015\nenv: {HCCL_IF_BASE_PORT: '61000'}\n"
                      "nodes: [{name: a, accelerator: ascend910}]\n")
    assert main([str(values), "--check"]) == 0
    assert capsys.readouterr().err == (
        f"warning: {values}: port: 61015 is among the 16 host ports HCCL takes from env HCCL_IF_BASE_PORT (61000) "
        "on Ascend nodes; the rendezvous and HCCL may collide on the master\n")
    values.write_text(values.read_text().replace("61015", "61016"))
    assert main([str(values), "--check"]) == 0 and capsys.readouterr().err == ""


def test_the_restart_message_is_the_same_in_both(helm, tmp_path, capsys):
    values = tmp_path / "values.yaml"
    values.write_text("name: t\nimage: i\nscript: /t.py\nnodes: [{name: a}]\n"
                      "failurePolicy: {maxRestarts: 5, backoffSeconds: 3600}\n")
    assert main([str(values), "--check"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (f"{values}: failurePolicy.maxRestarts: 5 restarts cannot all happen: Argo waits "
                    "failurePolicy.backoffSeconds (3600 s) before the first and doubles it before each further one, "
                    "so the waits before restart 5 alone add up to 111600 s, and Argo retries nothing past "
                    "timeouts.workflowDeadline (86400 s); at most 4 fit: lower maxRestarts or backoffSeconds, or "
                    "raise the deadline")
    result = helm_template(helm, values)
    assert result.returncode != 0 and line.split(": ", 1)[1] in result.stderr, result.stderr
