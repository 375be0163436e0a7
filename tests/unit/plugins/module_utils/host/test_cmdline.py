"""cmdline: the kernel's tokenizer and parameter handlers, case by case and against random input."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.host import cmdline as cl
from hypothesis import given, settings
from hypothesis import strategies as st


def raws(text):
    return [arg.raw for arg in cl.tokenize(text)]


def pairs(text):
    return [(arg.name, arg.value) for arg in cl.tokenize(text)]


# ------------------------------------------------------------------------------------------ tokenizer


def test_tokens_keep_spans_and_strip_quotes_like_next_arg():
    text = 'ro  dyndbg="file foo.c +p" "quoted=a b" x'
    args = cl.tokenize(text)
    assert [a.raw for a in args] == ["ro", 'dyndbg="file foo.c +p"', '"quoted=a b"', "x"]
    assert pairs(text) == [("ro", None), ("dyndbg", "file foo.c +p"), ("quoted", "a b"), ("x", None)]
    assert all(text[a.start : a.end] == a.raw for a in args)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('a b="c d', [("a", None), ("b", "c d")]),  # an unterminated quote runs to the end
        ('foo="bar"baz', [("foo", 'bar"baz')]),  # the closing quote is dropped only at the very end
        ('"flag"', [("flag", None)]),
        ('"', [("", None)]),
        ("=x", [("=x", None)]),  # a leading '=' is no separator (equals stays 0 in next_arg)
        ("=a=b", [("=a", "b")]),
        ('v=""', [("v", "")]),
        ('v="', [("v", "")]),
        ("a\tb\nc\x0bd\x0ce\rf\xa0g", [(c, None) for c in "abcdefg"]),  # the kernel's isspace, NBSP included
    ],
)
def test_next_arg_edge_cases(text, expected):
    assert pairs(text) == expected


def test_double_dash_ends_kernel_arguments_only_when_bare():
    args = cl.tokenize('ro -- single "--" --=x')
    assert [a.raw for a in cl.kernel_args(args)] == ["ro"]
    assert [a.raw for a in cl.kernel_args(cl.tokenize('ro --=x "--" y'))] == ["ro", "--=x"]


def test_names_compare_dashes_and_underscores_alike_everywhere():
    assert cl.parse_arg_text("kvm-intel.tdx=1").key == "kvm_intel.tdx"
    assert cl.parse_arg_text("intel-iommu=on").key == "intel_iommu"  # __setup names too (parameqn)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=' \t"=abc-_.,', max_size=40))
def test_tokenizer_never_raises_and_spans_cover_the_text(text):
    args = cl.tokenize(text)
    for arg in args:
        assert text[arg.start : arg.end] == arg.raw and arg.raw
    assert "".join(a.raw for a in args) == "".join(
        ch for i, ch in enumerate(text) if any(a.start <= i < a.end for a in args)
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abcxyz_.=-019,", min_size=1, max_size=12), max_size=12))
def test_plain_tokens_round_trip(tokens):
    assert raws(" ".join(tokens) + "\n") == tokens


# ------------------------------------------------------------------------------------------ booleans


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, True),
        ("1", True),
        ("Y", True),
        ("yes", True),
        ("on", True),
        ("true", True),
        ("0", False),
        ("N", False),
        ("off", False),
        ("false", False),
        ("", None),
        ("o", None),
        ("2", None),
        ("maybe", None),
    ],
)
def test_kernel_bool_follows_kstrtobool(value, expected):
    assert cl.kernel_bool(value) is expected


def test_module_bool_last_valid_occurrence_wins_and_invalid_is_unknown():
    finding = cl.module_bool(cl.tokenize("kvm-intel.tdx=0 x kvm_intel.tdx=1"), "kvm_intel.tdx")
    assert finding.value is True and finding.args == ["kvm-intel.tdx=0", "kvm_intel.tdx=1"]
    assert cl.module_bool(cl.tokenize("kvm_intel.tdx"), "kvm_intel.tdx").value is True  # bare means set
    bad = cl.module_bool(cl.tokenize("kvm_intel.tdx=1 kvm_intel.tdx=maybe"), "kvm_intel.tdx")
    assert bad.value is None and "refuses to load" in bad.problems[0]
    assert cl.module_bool(cl.tokenize("-- kvm_intel.tdx=1"), "kvm_intel.tdx").value is None


# ------------------------------------------------------------------------------------------ IOMMU


@pytest.mark.parametrize(
    ("line", "passthrough", "culprits"),
    [
        ("iommu=pt", True, ["iommu=pt"]),
        ("iommu=nomerge,pt", True, ["iommu=nomerge,pt"]),
        ("iommu=pt,nomerge", True, ["iommu=pt,nomerge"]),
        ("iommu=pt iommu=nomerge", True, ["iommu=pt"]),  # every occurrence is processed
        ("iommu=pt iommu=nopt", False, ["iommu=pt", "iommu=nopt"]),  # the last setting wins
        ("iommu.passthrough=1", True, ["iommu.passthrough=1"]),
        ("iommu.passthrough=on iommu.passthrough=0", False, ["iommu.passthrough=on", "iommu.passthrough=0"]),
        ("iommu.passthrough", None, []),  # an early parameter without a value is rejected (kstrtobool(NULL))
        ("iommu.passthrough=maybe", None, []),
        ("iommu=usedac,pt", None, []),  # usedac returns before the walk reaches pt
        ("iommu=ptfoo", True, ["iommu=ptfoo"]),  # strncmp prefix match, as the kernel does
        ("intel_iommu=on", None, []),
        ("-- iommu=pt", None, []),
        ('"iommu=pt"', True, ['"iommu=pt"']),
    ],
)
def test_iommu_passthrough_follows_the_kernel(line, passthrough, culprits):
    finding = cl.iommu(cl.tokenize(line))
    assert finding.passthrough is passthrough
    assert finding.passthrough_args == culprits


def test_iommu_off_and_amd_page_table():
    assert cl.iommu(cl.tokenize("iommu=off")).disabled is True
    assert cl.iommu(cl.tokenize("amd_iommu=off")).disabled is True
    assert cl.iommu(cl.tokenize("intel_iommu=on,sm_on")).intel_iommu is True
    assert cl.iommu(cl.tokenize("intel_iommu=on intel_iommu=off")).intel_iommu is False
    assert cl.iommu(cl.tokenize("amd_iommu=pgtbl_v2")).amd_pgtable_v2 is True
    assert cl.iommu(cl.tokenize("amd_iommu=pgtbl_v2 amd_iommu=pgtbl_v1")).amd_pgtable_v2 is False


@pytest.mark.parametrize(
    ("line", "present", "absent"),
    [
        ("ro iommu=pt", [], ["iommu=pt"]),
        ("iommu=pt,nomerge", ["iommu=nomerge"], ["iommu=pt,nomerge"]),
        ("iommu=soft iommu=nomerge,pt", ["iommu=soft,nomerge"], ["iommu=nomerge,pt"]),
        ("iommu.passthrough=1 iommu=pt", [], ["iommu.passthrough=1", "iommu=pt"]),
    ],
)
def test_passthrough_remedy_keeps_other_options(line, present, absent):
    remedy = cl.passthrough_remedy(cl.tokenize(line))
    assert remedy == {"needed": True, "present": present, "absent": absent}
    # Applying the remedy leaves a command line without passthrough.
    kept = [a.raw for a in cl.tokenize(line) if a.raw not in absent and a.key != "iommu"]
    assert cl.iommu(cl.tokenize(" ".join(kept + present))).passthrough is not True


def test_no_remedy_needed_without_passthrough():
    assert cl.passthrough_remedy(cl.tokenize("iommu=nomerge")) == {"needed": False, "present": [], "absent": []}


# ------------------------------------------------------------------------------------------ hibernation


@pytest.mark.parametrize(
    ("line", "disabled"),
    [
        ("nohibernate", True),
        ("nohibernate=0", True),  # __setup prefix match: any value still disables hibernation
        ("hibernate=no", True),
        ("hibernate=nope", True),
        ("hibernate=noresume", False),
        ("hibernate=nocompress", False),
        ("hibernate", False),
        ("ro quiet", False),
        ("-- nohibernate", False),
    ],
)
def test_hibernation_as_kernel_power_hibernate_c_reads_it(line, disabled):
    assert cl.hibernation_disabled(cl.tokenize(line)).value is disabled


# ------------------------------------------------------------------------------------------ facts


def test_cmdline_facts_report_only_relevant_arguments():
    line = "BOOT_IMAGE=/vmlinuz root=/dev/sda secret=hunter2 nohibernate kvm-intel.tdx=1 iommu=pt,nomerge"
    facts = cl.cmdline_facts(line, source="/proc/cmdline")
    assert facts["args"] == ["nohibernate", "kvm-intel.tdx=1", "iommu=pt,nomerge"]
    assert "hunter2" not in str(facts)
    assert facts["nohibernate"] is True and facts["kvm_intel_tdx"] is True
    assert facts["iommu_pt"] is True and facts["iommu"]["passthrough_args"] == ["iommu=pt,nomerge"]
    assert facts["iommu_passthrough_remedy"]["present"] == ["iommu=nomerge"]


def test_unknown_vendor_iommu_options_are_problems():
    facts = cl.cmdline_facts("amd_iommu=on intel_iommu=on,sm_on")
    assert len(facts["problems"]) == 1 and "amd_iommu=on" in facts["problems"][0]


def test_unreadable_command_line_is_all_unknown():
    facts = cl.cmdline_facts(None, source="/proc/cmdline")
    assert facts["readable"] is False
    assert facts["nohibernate"] is None and facts["iommu_pt"] is None and facts["iommu"]["passthrough"] is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.sampled_from(["iommu=", "iommu.passthrough=", "nohibernate", '"', "--"]))
def test_facts_never_raise(text):
    facts = cl.cmdline_facts(text)
    assert facts["readable"] is True
