"""PN66: an earlier turn's </think> in the prompt no longer hides the new reasoning block.

A DelegatingParser with the real DeepSeek-R1 reasoning parser (and, in one case, the real
Hermes tool parser) streams a reply token by token. The tokenizer is a tiny word-level one
built here, holding the marker tokens the parsers look up.
"""

from __future__ import annotations

import pytest

WORDS = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "[UNK]",
    "<|user|>", "<|bot|>", "hi", "hello", "again", "plan", "it", "answer", "done",
]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        additional_special_tokens=["<think>", "</think>", "<tool_call>", "</tool_call>"],
    )


def _ids(*words):
    return [WORDS.index(w) for w in words]


# user / model reply (with its reasoning) / user / generation prompt without <think>
PROMPT = _ids(
    "<|user|>", "hi", "<|bot|>", "<think>", "plan", "</think>", "hello",
    "<|user|>", "again", "<|bot|>",
)
REPLY = [("<think>", "<think>"), ("plan", "plan"), (" it", "it"), ("</think>", "</think>"), ("answer", "answer")]


def _parser(tokenizer, with_tools: bool):
    from vllm.parser.abstract_parser import DelegatingParser
    from vllm.reasoning.deepseek_r1_reasoning_parser import DeepSeekR1ReasoningParser
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    class R1Parser(DelegatingParser):
        reasoning_parser_cls = DeepSeekR1ReasoningParser
        tool_parser_cls = Hermes2ProToolParser if with_tools else None

    return R1Parser(tokenizer)


def _request(kwargs):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "again"}],
        chat_template_kwargs=kwargs,
    )


def _stream(parser, request, prompt):
    reasoning, content = "", ""
    for i, (text, word) in enumerate(REPLY):
        delta = parser.parse_delta(
            text, _ids(word), request, prompt_token_ids=prompt if i == 0 else None, finished=False
        )
        if delta is not None:
            reasoning += delta.reasoning or ""
            content += delta.content or ""
    return reasoning, content


@pytest.mark.parametrize("with_tools", [False, True])
@pytest.mark.parametrize("kwargs", [{"enable_thinking": True}, {"thinking": True}])
def test_fixed_old_turn_end_marker_does_not_leak_think(tokenizer, switch, with_tools, kwargs):
    switch("PN66", True)
    reasoning, content = _stream(_parser(tokenizer, with_tools), _request(kwargs), PROMPT)
    assert "<think>" not in content and "</think>" not in content
    assert "plan" not in content
    assert reasoning.replace(" ", "") == "planit"
    assert content == "answer"


@pytest.mark.parametrize("with_tools", [False, True])
def test_off_old_turn_end_marker_ends_reasoning_as_upstream(tokenizer, switch, with_tools):
    switch("PN66", False)
    reasoning, content = _stream(_parser(tokenizer, with_tools), _request({"enable_thinking": True}), PROMPT)
    # upstream 0.24.0: the prompt scan stops on the old </think>, the new block leaks
    assert reasoning == ""
    assert "</think>" in content or "plan" in content


def test_on_thinking_disabled_still_trusts_prompt(tokenizer, switch):
    switch("PN66", True)
    # enable_thinking=False: the template closes reasoning in the prompt; the reply is content
    prompt = PROMPT + _ids("<think>", "</think>")
    request = _request({"enable_thinking": False})
    parser = _parser(tokenizer, False)
    out = parser.parse_delta("answer", _ids("answer"), request, prompt_token_ids=prompt, finished=False)
    assert out is not None and out.content == "answer" and not out.reasoning
