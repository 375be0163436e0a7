"""emit.markdown: the CommonMark reference renderer shows text(s) as s, never as a tag, link or block."""

from html.parser import HTMLParser

import commonmark
import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError, markdown
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_render import render_html, render_markdown
from hypothesis import given, settings
from hypothesis import strategies as st

PUNCTUATION = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
PIECES = st.sampled_from([*PUNCTUATION, "a", "1", " ", "\t", "\n", "\r", "é", "<b>", "---", "1. ", "&amp;"])
OTHER = st.characters(blacklist_categories=("Cs", "Cc"))
HOSTILE = st.lists(PIECES | OTHER, max_size=12).map("".join)
# Where the fleet report puts text: a paragraph, a heading, a list item, strong emphasis.
CONTEXTS = ["%s", "### %s", "- %s", "**Fix:** %s", "**%s**"]


class _Text(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.data = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.data.append(data)


def _rendered(document):
    parser = _Text()
    parser.feed(commonmark.commonmark(document))
    parser.close()
    return parser.tags, "".join(parser.data).strip("\n")


@settings(max_examples=150, deadline=None)
@given(HOSTILE, st.sampled_from(CONTEXTS))
def test_text_renders_as_itself(value, context):
    if not markdown.shown(value):
        return
    tags, shown = _rendered(context % markdown.text(value))
    own_tags, own_text = _rendered(context % "ZZZ")
    assert tags == own_tags  # only the context's own block and emphasis
    assert shown == own_text.replace("ZZZ", markdown.shown(value), 1)


@settings(max_examples=100, deadline=None)
@given(HOSTILE)
def test_cells_render_as_themselves(value):
    tags, shown = _rendered(f"| {markdown.cell(value)} |")
    assert tags == ["p"] and shown == f"| {markdown.shown(value)} |"


@pytest.mark.parametrize("value", ["a\x00b", "\x1f", "a\x7f"])
def test_control_characters_are_refused_by_name(value):
    with pytest.raises(EmitError, match="node_name"):
        markdown.text(value, "node_name")


def test_a_code_block_cannot_be_closed_by_its_content():
    tags, shown = _rendered(markdown.code_block(["```", "<script>x</script>", "````"]) + "\n\n# after")
    assert tags == ["pre", "code", "h1"] and "<script>x</script>" in shown


def test_ordinary_names_stay_readable():
    assert markdown.text("tdx-1: machine.slice (6) tdx_host_platform 6.16.0") == (
        "tdx-1: machine.slice (6) tdx_host_platform 6.16.0"
    )


@pytest.fixture
def hostile_report():
    node = {
        "name": "<script>alert(1)</script>*x*",
        "verdict": "FAIL",
        "preflight_verdict": "FAIL",
        "ready": False,
        "technology": None,
        "kernel": "6.16",
        "pools": {},
        "findings": [],
        "error": "unreachable: [link](javascript:alert(1)) <img src=x onerror=alert(1)>",
        "sections": [],
        "blocking": [],
        "table": ["```", "<script>alert(2)</script>"],
        "gpu": None,
        "drift_reason": None,
    }
    summary = {"nodes": 1, "ready": 0, "not_ready": [node["name"]], "findings": 0, "critical": 0}
    return {"title": "TEE fleet report", "summary": summary, "kubernetes": False, "nodes": [node], "fleet_findings": []}


def test_a_hostile_node_name_is_text_in_report_md_and_report_html(hostile_report):
    rendered = commonmark.commonmark(render_markdown(hostile_report))
    assert "<script" not in rendered and "<img" not in rendered and "<a " not in rendered and "<em>" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;*x*" in rendered
    page = render_html(hostile_report)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;*x*" in page
