"""The engine's chat template: a fixed, deterministic rendering of messages to text.

Every node must render a conversation to the same tokens, or LMCache prefix keys differ and
nothing is shared. Each message becomes ``<|role|>\\n<content>\\n``; the generation prompt is
``<|assistant|>\\n``. A conversation that extends another one therefore extends its tokens too,
which is what multi-turn prefix reuse relies on.
"""

from __future__ import annotations

from collections.abc import Iterable


class ChatTemplateError(ValueError):
    """A message cannot be rendered (e.g. an image part)."""


def render_chat(messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True) -> str:
    text = "".join(f"<|{role}|>\n{content}\n" for role, content in messages)
    return text + "<|assistant|>\n" if add_generation_prompt else text


def message_text(content: str | list | None) -> str:
    """OpenAI message content (a string or a list of text parts) as one string; a non-text part is a
    ChatTemplateError (no vision input here)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise ChatTemplateError(f"unsupported content part type {part.type!r}; only text parts "
                                    f"are accepted")
        texts.append(part.text)
    # vLLM joins text parts with newlines.
    return "\n".join(texts)
