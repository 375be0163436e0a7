"""emit.prometheus: label values read back through the Prometheus client's parser; bad names refused."""

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError, prometheus
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

HOSTILE = st.text(st.sampled_from(list('\\"\n{},= a#é')) | st.characters(blacklist_categories=("Cs",)), max_size=15)


@settings(max_examples=150, deadline=None)
@given(HOSTILE, HOSTILE)
def test_label_values_read_back(node, resource):
    text = "\n".join(
        [
            prometheus.help_line("tee_keys_free", "TEE keys\nnot in use \\ here."),
            prometheus.type_line("tee_keys_free", "gauge"),
            prometheus.sample("tee_keys_free", {"node": node, "resource": resource}, 3),
            "",
        ]
    )
    families = list(text_string_to_metric_families(text))
    assert len(families) == 1 and len(families[0].samples) == 1
    sample = families[0].samples[0]
    assert sample.labels == {"node": node, "resource": resource} and sample.value == 3


@pytest.mark.parametrize("name", ["tee keys", "1tee", "tee-keys", "tee_keys\n", ""])
def test_bad_metric_names_are_refused(name):
    with pytest.raises(EmitError, match="metric name"):
        prometheus.sample(name, {}, 1)


@pytest.mark.parametrize("label", ["node name", "0node", "a:b", "__name", "n\n"])
def test_bad_label_names_are_refused_naming_the_metric(label):
    with pytest.raises(EmitError, match="tee_keys_free"):
        prometheus.sample("tee_keys_free", {label: "x"}, 1)
