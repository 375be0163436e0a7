"""emit.html: text never opens a tag, attribute values read back through html.parser; controls refused."""

from html.parser import HTMLParser

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError, html
from hypothesis import given, settings
from hypothesis import strategies as st

HOSTILE = st.text(st.sampled_from(list("<>&\"'=/ a;#\t\n\x00\x01é")) | st.characters(), max_size=20)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.data, self.attrs = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)

    def handle_endtag(self, tag):
        self.tags.append("/" + tag)

    def handle_data(self, data):
        self.data.append(data)


def _bad(value):
    return any((ord(ch) < 0x20 and ch not in "\t\n\r") or ord(ch) == 0x7F for ch in value)


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_text_and_attributes_read_back_or_are_refused(value):
    try:
        page = '<p title="{}">{}</p>'.format(html.attr(value, "node_name"), html.text(value, "node_name"))
    except EmitError as exc:
        assert "node_name" in str(exc) and _bad(value)
        return
    parser = _Collect()
    parser.feed(page)
    parser.close()
    assert parser.tags == ["p", "/p"] and parser.attrs == [("title", value)] and "".join(parser.data) == value
