"""Generation through vLLM, for GPUs: the same `generate` contract and FLOPs accounting as `Engine`.

Harnesses do not import this directly: `vtb.engine.select.open_engine` returns it when the
run says `engine=vllm` and a CUDA GPU and the `vllm` package are there. Prompts are encoded
by the same tokenizer code as the transformers engine (left-truncated to the same window) and
passed to vLLM as token ids, and continuations are decoded and cut at stop strings the same
way, so a harness sees the same texts from both engines up to numerics (fp32 on CPU vs the
GPU's kernels). FLOPs are charged as 2·params·(prompt + generated tokens), params counted as
the transformers engine counts them, before the call (the bound) and after it (the actual).
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from vtb.engine import usage
from vtb.engine.infer import check_budget, cut_at_stop, decodes_spaced, encode_prompts, stop_list
from vtb.engine.sampling import sequence_seeds
from vtb.models.meta import n_params_of

# vllm.LLM arguments a run may set through engine.options (conf/engine/vllm.yaml).
LLM_OPTIONS = ("dtype", "gpu_memory_utilization", "max_model_len", "enforce_eager", "tensor_parallel_size")
DEFAULTS = {"dtype": "auto", "gpu_memory_utilization": 0.5, "enforce_eager": True}


def llm_kwargs(model_dir: str | Path, max_positions: int, options: dict | None) -> dict:
    """vllm.LLM(**kwargs): the model dir for weights and tokenizer, the run's options checked by name."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(LLM_OPTIONS))
    if unknown:
        raise ValueError(
            f"engine.options {unknown} are not vLLM options this engine passes; known: {LLM_OPTIONS}"
        )
    kwargs = {**DEFAULTS, "max_model_len": max_positions, **options}
    return {"model": str(model_dir), "tokenizer": str(model_dir), "seed": 0, **kwargs}


def sampling_kwargs(
    max_new_tokens: int, temperature: float, top_p: float, seed: int | None, stop: list[str]
) -> dict:
    """SamplingParams for one prompt: greedy at temperature 0, stop strings kept in the output."""
    kwargs = {
        "max_tokens": max_new_tokens,
        "temperature": max(0.0, temperature),
        "top_p": top_p if temperature > 0 else 1.0,
        "stop": stop or None,
        "include_stop_str_in_output": True,
        "skip_special_tokens": True,
    }
    if temperature > 0:
        kwargs["seed"] = seed
    return kwargs


class VLLMEngine:
    """Loads a model directory into vLLM once; `generate` answers batches of prompts."""

    name = "vllm"

    def __init__(self, model_dir: str | Path, *, options: dict | None = None, llm=None) -> None:
        """`llm` lets CPU tests pass an object with vLLM's `generate` in place of a real vllm.LLM."""
        from transformers import AutoConfig

        self.model_dir = Path(model_dir)
        self.last_usage: dict = {}
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        config = AutoConfig.from_pretrained(self.model_dir)
        self.max_positions = int(
            getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 2048
        )
        self._n_params = n_params_of(self.model_dir)
        self._decoder = self.tokenizer.backend_tokenizer
        self.spaced = decodes_spaced(self.tokenizer)
        if llm is None:
            from vllm import LLM

            llm = LLM(**llm_kwargs(self.model_dir, self.max_positions, options))
        self.llm = llm

    @property
    def n_params(self) -> int:
        return self._n_params

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: list[str] | None = None,
        batch_size: int = 64,  # vLLM schedules its own batches; kept for the same signature
    ) -> list[str]:
        """As `Engine.generate`: continuations, cut right after the first stop string, FLOPs charged."""
        if not prompts or max_new_tokens <= 0:
            usage.charge(0.0)
            self.last_usage = {"prompt_tokens": 0, "generated_tokens": 0, "flops": 0.0}
            return [""] * len(prompts)
        from_vllm = _sampling_params_class(self.llm)
        stops = stop_list(stop)
        encoded = encode_prompts(self.tokenizer, prompts, self.max_positions, max_new_tokens)
        check_budget(self._n_params, encoded, max_new_tokens)
        seeds = sequence_seeds(prompts, seed) if temperature > 0 else [None] * len(prompts)
        params = [from_vllm(**sampling_kwargs(max_new_tokens, temperature, top_p, s, stops)) for s in seeds]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in encoded], params, use_tqdm=False)
        texts, prompt_tokens, generated = [], 0, 0
        for ids, out in zip(encoded, outputs, strict=True):
            token_ids = list(out.outputs[0].token_ids)
            text = self._decoder.decode(token_ids, skip_special_tokens=True)
            texts.append(cut_at_stop(text, stops)[0])
            prompt_tokens += len(ids)
            generated += len(token_ids)
        tokens = prompt_tokens + generated
        flops = usage.infer_flops(self._n_params, tokens)
        usage.charge(flops, infer_tokens=tokens)
        self.last_usage = {"prompt_tokens": prompt_tokens, "generated_tokens": generated, "flops": flops}
        return texts


def _sampling_params_class(llm):
    """vllm.SamplingParams, or the stand-in a CPU test's fake LLM provides."""
    cls = getattr(llm, "sampling_params_class", None)
    if cls is not None:
        return cls
    from vllm import SamplingParams

    return SamplingParams
