"""`p2pctl make-model DIR`: a tiny Llama for vLLM, made here without any download.

CI boxes and laptops cannot fetch a model from a hub, and vLLM needs a real Hugging Face folder: config.json,
safetensors weights, a tokenizer and a chat template. This writes one (about 1.2 MB): a byte-level BPE tokenizer
trained on the same deterministic text the test harness sends, and a 2-layer Llama with seeded random weights.
The same seed gives the same tokenizer and weights, so every node of a fleet can make its own copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from p2p_ops.errors import BadInput
from p2p_ops.harness import prompts

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
MARKER = "p2p-kv-ops-tiny-llama.json"


@dataclass(frozen=True)
class ModelSpec:
    seed: int = 1234
    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    max_position_embeddings: int = 8192


def _tokenizer(spec: ModelSpec):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([prompts.document(spec.seed, i, 4000) + prompts.question(spec.seed, i)
                             for i in range(64)], trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", model_max_length=spec.max_position_embeddings,
                                   chat_template=CHAT_TEMPLATE)


def make_model(out_dir: str | Path, spec: ModelSpec = ModelSpec(), force: bool = False) -> Path:
    """Write the model folder; refuses a non-empty folder that is not one of ours unless force."""
    out = Path(out_dir).expanduser().resolve()
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file() and not force:
        raise BadInput(f"{out}: folder exists and is not empty; pick another folder or pass --force")
    # The `node` extra (transformers first: missing, it names the extra that also brings torch).
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging
    import torch

    hf_logging.disable_progress_bar()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(spec)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
                      num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
                      num_key_value_heads=spec.num_heads, head_dim=spec.hidden_size // spec.num_heads,
                      max_position_embeddings=spec.max_position_embeddings, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / MARKER).write_text(json.dumps({"made_by": "p2pctl make-model", **spec.__dict__}, indent=2) + "\n")
    return out


def is_model_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / "config.json").is_file() and any(p.glob("*.safetensors")) and (p / "tokenizer.json").is_file()
