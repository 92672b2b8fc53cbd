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

from vtb.engine.infer import (
    Completion,
    charge_call,
    check_budget,
    cut_at_stop,
    decodes_spaced,
    encode_prompts,
    stop_list,
)
from vtb.engine.sampling import sequence_seeds
from vtb.models.meta import n_params_of

# vllm.LLM arguments a run may set through engine.options (conf/engine/vllm.yaml).
LLM_OPTIONS = (
    "dtype",
    "gpu_memory_utilization",
    "max_model_len",
    "enforce_eager",
    "tensor_parallel_size",
    "load_format",  # the model server sets "safetensors": no pickle is ever loaded
)
DEFAULTS = {"dtype": "auto", "gpu_memory_utilization": 0.5, "enforce_eager": True}


def serving_window(model_positions: int, options: dict | None) -> int:
    """The tokens one sequence may span: the model's window, or engine.options.max_model_len if smaller.

    vLLM refuses a prompt plus max_tokens longer than its max_model_len, so prompts must be
    left-truncated to this window, not to the model's own: the engine, the model server's
    request checks and /v1/models all use it. A larger max_model_len than the model's window
    is not used (the positions do not exist), nor is one that is not a positive integer.
    """
    wanted = (options or {}).get("max_model_len")
    if wanted is None:
        return int(model_positions)
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        raise ValueError(f"engine.options.max_model_len must be a positive integer, got {wanted!r}")
    return min(int(model_positions), wanted)


def llm_kwargs(model_dir: str | Path, max_positions: int, options: dict | None) -> dict:
    """vllm.LLM(**kwargs): the model dir for weights and tokenizer, the run's options checked by name.

    max_model_len is the serving window (`serving_window`), whatever the options ask for.
    """
    options = dict(options or {})
    unknown = sorted(set(options) - set(LLM_OPTIONS))
    if unknown:
        raise ValueError(
            f"engine.options {unknown} are not vLLM options this engine passes; known: {LLM_OPTIONS}"
        )
    kwargs = {**DEFAULTS, **options, "max_model_len": serving_window(max_positions, options)}
    return {"model": str(model_dir), "tokenizer": str(model_dir), "seed": 0, **kwargs}


def sampling_kwargs(
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int | None,
    stop: list[str],
    top_k: int = 0,
    logprobs: int | None = None,
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
        if top_k > 0:
            kwargs["top_k"] = top_k
    if logprobs is not None:
        kwargs["logprobs"] = logprobs
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
        model_positions = int(
            getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 2048
        )
        # What prompts are truncated to (here and in the model server): the smaller of the two.
        self.max_positions = serving_window(model_positions, options)
        self._n_params = n_params_of(self.model_dir)
        self._decoder = self.tokenizer.backend_tokenizer
        self.spaced = decodes_spaced(self.tokenizer)
        if llm is None:
            from vllm import LLM

            llm = LLM(**llm_kwargs(self.model_dir, model_positions, options))
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
        kwargs = dict(temperature=temperature, top_p=top_p, seed=seed, stop=stop)
        return [c.text for c in self.complete(prompts, max_new_tokens=max_new_tokens, **kwargs)]

    def complete(
        self,
        prompts: list[str] | list[list[int]],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
        stop: list[str] | None = None,
        batch_size: int = 64,
        logprobs: int | None = None,
    ) -> list[Completion]:
        """As `Engine.complete`: texts or token ids in, `Completion`s out, FLOPs charged."""
        if not prompts or max_new_tokens <= 0:
            charge_call(self, 0, 0)
            return [Completion("", 0, 0, "length") for _ in prompts]
        from_vllm = _sampling_params_class(self.llm)
        stops = stop_list(stop)
        if isinstance(prompts[0], str):
            texts, encoded = (
                prompts,
                encode_prompts(self.tokenizer, prompts, self.max_positions, max_new_tokens),
            )
        else:
            texts, encoded = [" ".join(map(str, p)) for p in prompts], [list(p) for p in prompts]
        check_budget(self._n_params, encoded, max_new_tokens)
        seeds = sequence_seeds(texts, seed) if temperature > 0 else [None] * len(prompts)
        params = [
            from_vllm(**sampling_kwargs(max_new_tokens, temperature, top_p, s, stops, top_k, logprobs))
            for s in seeds
        ]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in encoded], params, use_tqdm=False)
        done, prompt_tokens, generated = [], 0, 0
        for ids, out in zip(encoded, outputs, strict=True):
            first = out.outputs[0]
            token_ids = list(first.token_ids)
            text, hit = cut_at_stop(self._decoder.decode(token_ids, skip_special_tokens=True), stops)
            finish = "stop" if hit or getattr(first, "finish_reason", "") == "stop" else "length"
            done.append(self._completion(Completion(text, len(ids), len(token_ids), finish), first, logprobs))
            prompt_tokens += len(ids)
            generated += len(token_ids)
        charge_call(self, prompt_tokens, generated)
        return done

    def _completion(self, c: Completion, output, logprobs: int | None) -> Completion:
        """Copy vLLM's per-token logprobs (a dict token id -> Logprob per position) into `c`."""
        if logprobs is None or not getattr(output, "logprobs", None):
            return c
        name = self._decoder.id_to_token
        c.tokens = [name(t) or "" for t in output.token_ids]
        c.token_logprobs = [
            float(pos[t].logprob) for t, pos in zip(output.token_ids, output.logprobs, strict=True)
        ]
        c.top_logprobs = [
            {
                name(t) or str(t): float(lp.logprob)
                for t, lp in sorted(pos.items(), key=lambda kv: -kv[1].logprob)[:logprobs]
            }
            for pos in output.logprobs
        ]
        return c


def _sampling_params_class(llm):
    """vllm.SamplingParams, or the stand-in a CPU test's fake LLM provides."""
    cls = getattr(llm, "sampling_params_class", None)
    if cls is not None:
        return cls
    from vllm import SamplingParams

    return SamplingParams
