"""JSON embedded in the HTML report's and the viewer's <script> elements: no text inside it
(a task name, a configuration label, a transcript) can end the element or open an HTML comment
(``<!--<script>`` makes the parser treat a later ``</script>`` as data, a script-data escape)."""

import json

import pytest

from agentmeter.report.html.page import _script_json
from agentmeter.report.viewer.pages import json_str


@pytest.mark.parametrize("text", ["</script><img src=x onerror=alert(1)>", "<!--<script>", "a<b"])
def test_script_json_has_no_angle_bracket_and_reads_back(text: str) -> None:
    for out in (_script_json({"name": text}), json_str(text)):
        assert "<" not in out
    assert json.loads(_script_json({"name": text})) == {"name": text}
    assert json.loads(json_str(text)) == text
