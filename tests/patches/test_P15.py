"""P15: a ``None`` tool argument is read as JSON null where the schema allows null.

P15 has no env flag (always on), so the ``test_off_*`` cases check the inputs the patch
does not touch: they must come out exactly as upstream 0.24.0 returns them.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def utils():
    from vllm.tool_parsers import utils

    return utils


@pytest.mark.parametrize("text", ["None", "none", "NONE"])
def test_fixed_none_is_null_for_nullable_schema(utils, switch, text):
    switch("P15", True)
    assert utils.coerce_to_schema_type(text, ["integer", "null"]) is None
    assert utils.coerce_to_schema_type(text, ["string", "null"]) is None


def test_fixed_parser_engine_coerces_none_argument(utils, switch):
    switch("P15", True)
    from vllm.parser.engine.parser_engine import ParserEngine

    args = {"limit": "None", "query": "weather"}
    props = {"limit": {"type": ["integer", "null"]}, "query": {"type": "string"}}
    coerced, changed = ParserEngine._coerce_dict(args, props)
    assert changed is True
    assert coerced == {"limit": None, "query": "weather"}


def test_off_null_and_non_nullable_inputs_unchanged(utils):
    # "null" keeps working, and a schema without null never turns "None" into None.
    assert utils.coerce_to_schema_type("null", ["integer", "null"]) is None
    assert utils.coerce_to_schema_type("None", "string") == "None"
    assert utils.coerce_to_schema_type("None", ["integer"]) == "None"
    assert utils.coerce_to_schema_type("7", ["integer", "null"]) == 7
    assert utils.coerce_to_schema_type("Nonesuch", ["string", "null"]) == "Nonesuch"
