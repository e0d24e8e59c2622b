"""P62: structured output notices a reasoning end that sits among speculated tokens.

A real StructuredOutputManager with the real xgrammar backend and the DeepSeek-R1
reasoning parser drives real Request objects. Around them: a namespace config and a tiny
word-level tokenizer built here (regex grammar "yes|no", reasoning in <think>...</think>).

vLLM 0.34.0 fixed both faults its own way: ``_get_constraint_bounds`` finds the reasoning
end among a step's tokens, ``grammar_bitmask`` constrains the draft rows after it, and the
new ``StructuredOutputManager.accept_tokens`` (which replaces ``should_advance``) feeds the
grammar exactly the tokens after the marker. P62 is retired there: its own tests run on the
releases that carry it, ``test_upstream_*`` checks pristine 0.34.0.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("xgrammar")

from _pins import only_on  # noqa: E402

CARRIED = only_on("<0.34", "P62 is retired on 0.34.0 (fixed upstream); the test drives 0.24.0's should_advance")
UPSTREAM = only_on(">=0.34", "0.34.0's accept_tokens and constraint bounds")

WORDS = ["<think>", "</think>", "</s>", "[UNK]", "plan", "yes", "no", "maybe", "q"]
V = len(WORDS)
K = 3  # speculative tokens per step
ALL = set(WORDS)
ANSWER = {"yes", "no"}


def _ids(*words):
    return [WORDS.index(w) for w in words]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", eos_token="</s>", additional_special_tokens=["<think>", "</think>"]
    )


@pytest.fixture
def manager(tokenizer):
    from vllm.reasoning.deepseek_r1_reasoning_parser import DeepSeekR1ReasoningParser
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    cfg = SimpleNamespace(
        parallel_config=SimpleNamespace(distributed_executor_backend=None),
        scheduler_config=SimpleNamespace(max_num_seqs=4),
        model_config=SimpleNamespace(
            skip_tokenizer_init=True,
            is_diffusion=False,
            get_vocab_size=lambda: V,
            hf_config=SimpleNamespace(model_type="opt"),  # 0.34.0's xgrammar backend reads it
        ),
        structured_outputs_config=SimpleNamespace(enable_in_reasoning=False, disable_any_whitespace=False),
        speculative_config=SimpleNamespace(num_speculative_tokens=K),
        num_speculative_tokens=K,
    )
    mgr = StructuredOutputManager(cfg)
    # skip_tokenizer_init keeps the manager from loading a model tokenizer; give it ours.
    mgr.tokenizer = tokenizer
    mgr.reasoner_cls = DeepSeekR1ReasoningParser
    mgr.backend = XgrammarBackend(cfg, tokenizer=tokenizer, vocab_size=V)
    return mgr


def _request(manager, req_id="r1"):
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request

    params = SamplingParams(structured_outputs=StructuredOutputsParams(regex="(yes|no)"), max_tokens=16)
    req = Request(req_id, _ids("q", "<think>"), params, None)
    req.structured_output_request.grammar = manager._create_grammar(req)
    return req


def _rows(bitmask):
    return [{WORDS[i] for i in range(V) if (int(row[i // 32]) >> (i % 32)) & 1} for row in bitmask]


def _step(manager, req, tokens):
    """What update_from_output does before should_advance: append, then count as computed."""
    req.append_output_token_ids(_ids(*tokens))
    req.num_computed_tokens = len(req.all_token_ids) - 1
    return manager.should_advance(req)


@CARRIED
def test_fixed_rows_after_drafted_marker_are_constrained(manager, switch):
    switch("P62", True)
    _assert_rows_after_drafted_marker_constrained(manager)


def _assert_rows_after_drafted_marker_constrained(manager):
    """The rows of "plan </think> yes": unmasked while reasoning, then the grammar's; and the
    grammar itself is left where it was (it still expects the first answer token)."""
    req = _request(manager)
    bitmask = manager.grammar_bitmask({"r1": req}, ["r1"], {"r1": _ids("plan", "</think>", "yes")})
    rows = _rows(bitmask)
    assert len(rows) == K + 1
    assert rows[0] == ALL and rows[1] == ALL  # still reasoning, up to and at the marker
    assert rows[2] == ANSWER  # first answer token
    assert "yes" not in rows[3] and "maybe" not in rows[3] and "</s>" in rows[3]  # after "yes"
    assert req.structured_output_request.grammar.validate_tokens(_ids("no")) == _ids("no")


@CARRIED
def test_fixed_marker_among_accepted_drafts_switches_grammar_on(manager, switch):
    switch("P62", True)
    req = _request(manager)
    assert _step(manager, req, ["plan"]) is False
    # one spec step: two drafts accepted + bonus -> "plan </think> yes"
    assert _step(manager, req, ["plan", "</think>", "yes"]) is False
    sreq = req.structured_output_request
    assert sreq.reasoning_ended is True
    grammar = sreq.grammar
    # "yes" was fed to the grammar: only the end of the answer is left
    assert grammar.validate_tokens(_ids("no")) == []
    assert grammar.validate_tokens(_ids("</s>")) == _ids("</s>")
    # next steps advance normally (drafts get validated, output gets accepted)
    assert manager.should_advance(req) is True


@CARRIED
def test_on_marker_as_last_token_defers_like_upstream(manager, switch):
    switch("P62", True)
    req = _request(manager)
    assert _step(manager, req, ["plan", "</think>"]) is False
    assert req.structured_output_request.reasoning_ended is True
    assert req.structured_output_request.grammar.validate_tokens(_ids("yes")) == _ids("yes")
    assert manager.should_advance(req) is True


@CARRIED
def test_off_draft_rows_unconstrained_as_upstream(manager, switch):
    switch("P62", False)
    req = _request(manager)
    bitmask = manager.grammar_bitmask({"r1": req}, ["r1"], {"r1": _ids("plan", "</think>", "yes")})
    assert _rows(bitmask) == [ALL] * (K + 1)


@CARRIED
def test_off_marker_among_drafts_missed_as_upstream(manager, switch):
    switch("P62", False)
    req = _request(manager)
    assert _step(manager, req, ["plan", "</think>", "yes"]) is False
    # upstream only looks at the step's last token ("yes"): reasoning still open
    assert not req.structured_output_request.reasoning_ended
    assert req.structured_output_request.grammar.validate_tokens(_ids("yes")) == _ids("yes")


@CARRIED
def test_off_marker_as_last_token_found_as_upstream(manager, switch):
    switch("P62", False)
    req = _request(manager)
    assert _step(manager, req, ["plan", "</think>"]) is False
    assert req.structured_output_request.reasoning_ended is True
    assert manager.should_advance(req) is True


def _accept(manager, req, tokens):
    """What 0.34.0's update_from_output does with a step's new tokens: append them, then
    hand them to the manager, which feeds the grammar the part after a reasoning end."""
    ids = _ids(*tokens)
    req.append_output_token_ids(ids)
    req.num_computed_tokens = len(req.all_token_ids) - 1
    return manager.accept_tokens(req, ids)


@UPSTREAM
def test_upstream_rows_after_drafted_marker_are_constrained(manager):
    """Pristine 0.34.0: the draft rows after a drafted "</think>" carry the grammar mask,
    and building the mask leaves the grammar where it was."""
    _assert_rows_after_drafted_marker_constrained(manager)


@UPSTREAM
def test_upstream_grammar_sees_only_the_tokens_after_a_drafted_reasoning_end(manager):
    """Pristine 0.34.0: one spec step accepts "plan </think> yes": reasoning ends, the
    grammar is fed "yes" (not "plan" or the marker), so only the end of the answer is left."""
    req = _request(manager)
    assert _accept(manager, req, ["plan"]) is True
    assert not req.structured_output_request.reasoning_ended
    assert _accept(manager, req, ["plan", "</think>", "yes"]) is True
    sreq = req.structured_output_request
    assert sreq.reasoning_ended is True
    assert sreq.grammar.validate_tokens(_ids("no")) == []
    assert sreq.grammar.validate_tokens(_ids("</s>")) == _ids("</s>")


@UPSTREAM
def test_upstream_marker_as_last_token_leaves_the_grammar_at_its_start(manager):
    req = _request(manager)
    assert _accept(manager, req, ["plan", "</think>"]) is True
    sreq = req.structured_output_request
    assert sreq.reasoning_ended is True
    assert sreq.grammar.validate_tokens(_ids("yes")) == _ids("yes")
