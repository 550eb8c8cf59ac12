"""Build the two local assets torchtitan's llama3 debug model needs, offline.

torchtitan's wheel ships neither tests/assets/tokenizer nor tests/assets/c4_test,
and the CI machine cannot reach the Hugging Face hub, so both are made here:

  <out>/tokenizer/  tokenizer.json + tokenizer_config.json, a byte-level BPE
                    trained on the generated text (vocab < 2048, the debug
                    model's embedding size), loaded by HuggingFaceTokenizer
                    from --hf_assets_path.
  <out>/c4_test/    c4_demo.json, JSON lines {"text": ...}, loaded by the
                    "c4_test" dataset entry (datasets.load_dataset(<dir>))
                    from --dataloader.dataset_path.

Usage: python build_assets.py <out_dir>
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
VOCAB_SIZE = 1024  # must stay <= 2048, the llama3 debugmodel's vocab_size
N_DOCS = 400

WORDS = [
    "the",
    "a",
    "rank",
    "gloo",
    "collective",
    "all",
    "reduce",
    "gather",
    "scatter",
    "broadcast",
    "barrier",
    "step",
    "loss",
    "model",
    "layer",
    "tensor",
    "shard",
    "gradient",
    "optimizer",
    "learning",
    "rate",
    "batch",
    "token",
    "sequence",
    "attention",
    "head",
    "norm",
    "weight",
    "bias",
    "memory",
    "process",
    "group",
    "timeout",
    "watchdog",
    "flight",
    "recorder",
    "trace",
    "span",
    "hang",
    "stall",
    "desync",
    "culprit",
    "ring",
    "buffer",
    "archive",
    "parquet",
    "query",
    "train",
    "validate",
    "checkpoint",
    "save",
    "load",
    "node",
    "host",
    "port",
    "socket",
    "thread",
    "kernel",
    "compute",
    "is",
    "was",
    "will",
    "be",
    "has",
    "have",
    "to",
    "of",
    "in",
    "on",
    "for",
    "with",
    "from",
    "by",
    "at",
    "as",
    "and",
    "or",
    "not",
    "but",
]


def make_docs(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(N_DOCS):
        sentences = []
        for _ in range(rng.randint(3, 12)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, 20))]
            sentences.append(" ".join(words).capitalize() + ".")
        docs.append(" ".join(sentences))
    return docs


def build_tokenizer(docs: list[str], out: Path) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    # HuggingFaceTokenizer reads BOS/EOS from here; without it encode() cannot
    # add them and the dataset's add_bos/add_eos silently do nothing.
    config = {
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def build_dataset(docs: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "c4_demo.json").open("w") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "assets")
    docs = make_docs()
    build_tokenizer(docs, out / "tokenizer")
    build_dataset(docs, out / "c4_test")
    print(f"wrote {out}/tokenizer and {out}/c4_test")


if __name__ == "__main__":
    main()
