"""A target served by another program: llama.cpp's server (`/infill`) or any OpenAI-compatible
completions server (vLLM, TGI, Ollama, llama.cpp's `/v1/completions`).

The remote does the decoding (and its own batching, prefix caching and speculation); specfill
keeps the prompt, post-processing and cache. Answers are streamed, so the completion layer's
stop check runs after every chunk and a decided, cancelled or superseded answer closes its
HTTP stream at once (the server stops generating when its client goes away).

Every failure becomes a `RemoteError` with a `kind` (unreachable, auth, not_found,
server_error, timeout, bad_response, unsupported, config) and a one-line message that never
contains the API key.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import httpx

from .protocol import Health, Prompt
from .settings import GenerationResult, GenerationSettings, GenerationStats, StopCheck

log = logging.getLogger(__name__)

BACKENDS = ("auto", "llamacpp", "openai")
PROBE_EXTRA = "probe: not a list"    # an /infill body the server refuses before it makes a task
FAILURE_KINDS = ("unreachable", "auth", "not_found", "server_error", "timeout", "bad_response",
                 "unsupported", "config")


def is_remote(target: str) -> bool:
    return isinstance(target, str) and target.lower().startswith(("http://", "https://"))


class RemoteError(RuntimeError):
    """A remote target failed; `kind` is one of FAILURE_KINDS, str() is one line for the user."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class RemoteSettings:
    url: str                          # base URL, e.g. http://gpu-host:8080 (a trailing /v1 is fine)
    backend: str = "auto"             # auto | llamacpp | openai
    api_key: str = field(default="", repr=False)   # never logged: repr and messages leave it out
    api_key_env: str = ""             # or read it from this environment variable
    verify_tls: bool = True
    ca_bundle: str = ""               # a CA bundle file for a private CA ("" = the system's)
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 30.0      # longest wait for the next byte of an answer
    model: str = ""                   # OpenAI `model` field; "" = the first of /v1/models

    def __post_init__(self):
        if not is_remote(self.url):
            raise RemoteError("config", f"remote target {self.url!r}: expected an http:// or https:// URL")
        if self.backend not in BACKENDS:
            raise RemoteError("config", f"backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        if self.ca_bundle and not os.path.isfile(self.ca_bundle):
            raise RemoteError("config", f"CA bundle {self.ca_bundle!r} is not a file")

    @property
    def base_url(self) -> str:
        url = self.url.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    def key(self) -> str:
        if self.api_key:
            return self.api_key
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""


@dataclass
class ServerInfo:
    """What the probe learned: the protocol to speak and what the server says about its model."""
    backend: str                 # llamacpp | openai
    model: str = ""              # model name or path as the server reports it
    n_ctx: int = 0               # context per slot (0: unknown)
    fim: bool = False            # llama.cpp: /infill works (the model has FIM tokens)
    slots: int = 0               # llama.cpp: parallel slots


@dataclass
class InfillPrompt:
    """llama.cpp /infill: the server tokenizes and builds the FIM prompt (its own template)."""
    prefix: str
    suffix: str
    extra: tuple[tuple[str, str], ...] = ()   # (filename, text) chunks of other files
    indent: int | None = None    # n_indent; None: the cursor line's (infill_indent)


def infill_indent(prefix: str, suffix: str) -> int:
    """llama.cpp's `n_indent` for a cursor at the end of `prefix`: the cursor line's indentation
    in characters, as llama.vim sends it. The server then ends the answer at the first line
    indented by fewer characters, where post-processing's dedent rule cuts too (it measures
    widths, a tab being several columns). Where a space-indented cursor line sits among
    tab-indented lines a tab would count as one character and stop lines that rule keeps, so
    none is sent (0) and the stop check alone cuts."""
    line = prefix.rsplit("\n", 1)[-1]
    lead = line[:len(line) - len(line.lstrip(" \t"))]
    if " " in lead and _TAB_INDENTED.search(prefix + suffix):
        return 0
    return len(lead)


_TAB_INDENTED = re.compile(r"(?:^|\n)\t")


@dataclass
class TextPrompt:
    """/v1/completions: a prompt built by specfill (text with the family's sentinels, or ids)."""
    prompt: str | list[int]
    stop: tuple[str, ...] = ()


def _timeouts(s: RemoteSettings) -> httpx.Timeout:
    return httpx.Timeout(connect=s.connect_timeout_s, read=s.read_timeout_s, write=s.read_timeout_s,
                         pool=s.connect_timeout_s)


class RemoteTarget:
    """One HTTP client (connection pool) for one remote server."""

    def __init__(self, settings: RemoteSettings):
        self.settings = settings
        headers = {"Accept": "application/json"}
        key = settings.key()
        if settings.api_key_env and not key:
            log.warning("api key environment variable %s is not set", settings.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        verify: bool | str = settings.ca_bundle or settings.verify_tls
        self.client = httpx.Client(base_url=settings.base_url, headers=headers, verify=verify,
                                   timeout=_timeouts(settings), follow_redirects=False)
        self.info: ServerInfo | None = None

    def close(self) -> None:
        self.client.close()

    # -- errors --------------------------------------------------------------------------------
    def _where(self, path: str) -> str:
        return f"{self.settings.base_url}{path}"

    def _http_error(self, path: str, response: httpx.Response) -> RemoteError:
        code = response.status_code
        try:
            body = response.read().decode("utf-8", "replace")
        except httpx.HTTPError:
            body = ""
        detail = _error_detail(body)
        where = self._where(path)
        if code in (401, 403):
            why = "no API key was sent" if not self.settings.key() else "the API key was refused"
            return RemoteError("auth", f"{where}: {code} {why} ({detail or 'unauthorized'}); "
                                       "check specfill.apiKey / apiKeyEnv")
        if code == 404:
            return RemoteError("not_found", f"{where}: 404 not found (is {self.settings.base_url} a "
                                            f"{'llama.cpp' if 'infill' in path else 'OpenAI-compatible'} "
                                            "server? check targetModel and backend)")
        if code == 501:
            return RemoteError("unsupported", f"{where}: {detail or 'not supported by this server'}")
        if code >= 500:
            return RemoteError("server_error", f"{where}: server error {code}: {detail or 'no details'}")
        return RemoteError("bad_response", f"{where}: {code}: {detail or 'request refused'}")

    def _transport_error(self, path: str, exc: httpx.HTTPError) -> RemoteError:
        where = self._where(path)
        if isinstance(exc, httpx.ConnectTimeout):
            return RemoteError("unreachable", f"cannot reach {where}: no connection within "
                                              f"{self.settings.connect_timeout_s:g} s")
        if isinstance(exc, httpx.TimeoutException):
            return RemoteError("timeout", f"{where}: no answer within {self.settings.read_timeout_s:g} s "
                                          "(read timeout)")
        if isinstance(exc, httpx.ConnectError):
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "CERTIFICATE" in why.upper() or "SSL" in why.upper():
                return RemoteError("unreachable", f"cannot reach {where}: TLS failed ({why}); "
                                                  "set caBundle or verifyTls")
            return RemoteError("unreachable", f"cannot reach {where}: {why}")
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
            return RemoteError("bad_response", f"{where}: the answer was cut off ({type(exc).__name__})")
        return RemoteError("unreachable", f"{where}: {type(exc).__name__}: {exc}")

    def _get_json(self, path: str) -> dict:
        try:
            r = self.client.get(path)
        except httpx.HTTPError as exc:
            raise self._transport_error(path, exc) from None
        if r.status_code != 200:
            raise self._http_error(path, r)
        try:
            return r.json()
        except ValueError:
            raise RemoteError("bad_response", f"{self._where(path)}: malformed JSON ({len(r.content)} bytes)") from None

    # -- probing -------------------------------------------------------------------------------
    def probe(self) -> ServerInfo:
        """Which protocol the server speaks (backend auto) and what it says about its model."""
        backend = self.settings.backend
        if backend in ("auto", "llamacpp"):
            try:
                props = self._get_json("/props")
            except RemoteError as e:
                if backend == "llamacpp" or e.kind not in ("not_found", "bad_response"):
                    raise
                props = None
            if isinstance(props, dict) and "default_generation_settings" in props:
                gen = props.get("default_generation_settings") or {}
                info = ServerInfo("llamacpp", model=str(props.get("model_path", "")),
                                  n_ctx=int(gen.get("n_ctx", 0) or 0), slots=int(props.get("total_slots", 0) or 0))
                info.fim = self._infill_works()
                self.info = info
                return info
            if backend == "llamacpp":
                raise RemoteError("not_found", f"{self._where('/props')}: not a llama.cpp server "
                                               "(no default_generation_settings); try backend openai")
        models = self._get_json("/v1/models")
        data = models.get("data") if isinstance(models, dict) else None
        names = [str(m.get("id")) for m in data or [] if isinstance(m, dict) and m.get("id")]
        model = self.settings.model or (names[0] if names else "")
        n_ctx = 0
        for m in data or []:
            if isinstance(m, dict) and m.get("id") == model:
                n_ctx = int(m.get("max_model_len") or (m.get("meta") or {}).get("n_ctx_train") or 0)
        self.info = ServerInfo("openai", model=model, n_ctx=n_ctx)
        return self.info

    def _infill_works(self) -> bool:
        """Whether /infill works for the served model, without running a task: a slot that
        ran the probe would lose the prompt it keeps cached. llama.cpp checks the model's FIM
        tokens before it reads the body, so a body with `input_extra` not a list is refused
        as invalid (400) by a server that can infill and as not supported (501) by one that
        cannot. A server too old to know `input_extra` runs it as a tiny request (200)."""
        try:
            r = self.client.post("/infill", json={"input_prefix": "", "input_suffix": "", "n_predict": 0,
                                                  "cache_prompt": False, "input_extra": PROBE_EXTRA})
        except httpx.HTTPError as exc:
            raise self._transport_error("/infill", exc) from None
        detail = _error_detail(r.text)
        if r.status_code == 200 or (r.status_code == 400 and "input_extra" in detail):
            return True
        if r.status_code in (400, 501):   # "Infill is not supported by this model"
            log.info("%s: /infill unavailable: %s", self.settings.base_url, detail)
            return False
        raise self._http_error("/infill", r)

    # -- streaming -----------------------------------------------------------------------------
    def stream(self, prompt: InfillPrompt | TextPrompt, settings: GenerationSettings,
               timings: dict | None = None, extra: dict | None = None) -> Iterator[str]:
        """Text pieces as the server sends them. Closing the generator (or leaving the loop)
        closes the HTTP stream. `timings` receives the server's figures when it sends them;
        `extra` adds fields to the request body (a server's own options)."""
        info = self.info or self.probe()
        if isinstance(prompt, InfillPrompt):
            path, body = "/infill", self._infill_body(prompt, settings)
        else:
            path, body = "/v1/completions", self._completions_body(prompt, settings, info)
        body.update(extra or {})
        try:
            with self.client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    raise self._http_error(path, response)
                yield from self._events(path, response, timings)
        except httpx.HTTPError as exc:
            raise self._transport_error(path, exc) from None

    def _infill_body(self, p: InfillPrompt, s: GenerationSettings) -> dict:
        body = {"input_prefix": p.prefix, "input_suffix": p.suffix,
                "input_extra": [{"filename": f, "text": t} for f, t in p.extra],
                "n_predict": s.max_new_tokens, "cache_prompt": True, "stream": True,
                "n_indent": infill_indent(p.prefix, p.suffix) if p.indent is None else p.indent,
                "temperature": s.temperature, "top_p": s.top_p}
        if s.temperature <= 0:
            body["top_k"] = 1          # greedy: the argmax, as the local engine
        elif s.top_k:
            body["top_k"] = s.top_k
        if s.seed is not None:
            body["seed"] = s.seed
        if s.time_budget_ms:
            body["t_max_predict_ms"] = int(s.time_budget_ms)
        return body

    def _completions_body(self, p: TextPrompt, s: GenerationSettings, info: ServerInfo) -> dict:
        body = {"prompt": p.prompt, "max_tokens": s.max_new_tokens, "temperature": s.temperature,
                "top_p": s.top_p, "stream": True}
        if info.model:
            body["model"] = info.model
        if p.stop:
            body["stop"] = list(p.stop)[:4]   # the OpenAI API takes at most 4
        if s.seed is not None:
            body["seed"] = s.seed
        if info.backend == "llamacpp":   # llama.cpp's extensions to the OpenAI body
            body["cache_prompt"] = True
            if s.temperature <= 0:
                body["top_k"] = 1
        return body

    def _events(self, path: str, response: httpx.Response, timings: dict | None) -> Iterator[str]:
        """Server-sent events -> text pieces; raises if the stream ends before the answer does."""
        finished = False
        for line in response.iter_lines():
            if not line or line.startswith(":"):
                continue
            if not line.startswith("data:"):
                if line.startswith(("event:", "id:", "retry:")):
                    continue
                raise RemoteError("bad_response", f"{self._where(path)}: unexpected line in the stream: {line[:60]!r}")
            data = line[5:].strip()
            if data == "[DONE]":
                finished = True
                break
            try:
                event = json.loads(data)
            except ValueError:
                raise RemoteError("bad_response", f"{self._where(path)}: malformed JSON in the stream: "
                                                  f"{data[:60]!r}") from None
            if not isinstance(event, dict):
                raise RemoteError("bad_response", f"{self._where(path)}: unexpected JSON in the stream")
            if "error" in event:
                raise RemoteError("server_error", f"{self._where(path)}: {_error_detail(json.dumps(event))}")
            text, done = _event_text(event)
            if text:
                yield text
            if timings is not None and isinstance(event.get("timings"), dict):
                timings.update(event["timings"])
            if done:
                finished = True
                if path == "/infill" or "choices" not in event:
                    break    # llama.cpp's native stream ends with stop: true
        if not finished:
            raise RemoteError("bad_response", f"{self._where(path)}: the stream ended before the answer did "
                                              "(truncated)")


def _event_text(event: dict) -> tuple[str, bool]:
    """(text, finished) of one streamed event, native llama.cpp or OpenAI style."""
    if "choices" in event:
        choices = event.get("choices") or []
        if not choices:
            return "", False
        c = choices[0] if isinstance(choices[0], dict) else {}
        text = c.get("text")
        if text is None:
            text = (c.get("delta") or {}).get("content") or ""
        if not isinstance(text, str):
            raise RemoteError("bad_response", "unexpected JSON in the stream (text is not a string)")
        return text, c.get("finish_reason") is not None
    text = event.get("content", "")
    if not isinstance(text, str):
        raise RemoteError("bad_response", "unexpected JSON in the stream (content is not a string)")
    return text, bool(event.get("stop"))


def _error_detail(body: str) -> str:
    """The server's own error message, one line."""
    body = (body or "").strip()
    try:
        j = json.loads(body)
    except ValueError:
        return body.splitlines()[0][:200] if body else ""
    if isinstance(j, dict):
        err = j.get("error", j)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or ""
        else:
            msg = str(err)
        return " ".join(str(msg).split())[:200]
    return ""


# ---------------------------------------------------------------------------------- the engine

@dataclass
class RemoteConfig:
    """What the completion layer reads from an engine's config (as EngineConfig)."""
    target: str
    max_cache_tokens: int = 4096


@dataclass
class RemoteResult(GenerationResult):
    piece_ends: list[int] = field(default_factory=list)   # end offset in `text` of each streamed piece

    def pieces_covering(self, chars: int) -> int:
        """How many streamed pieces (tokens) it took to produce the first `chars` characters."""
        return next((i + 1 for i, end in enumerate(self.piece_ends) if end >= chars), len(self.piece_ends)) if chars else 0


class RemoteEngine:
    """A remote target as the completion layer's `Engine` (engine/protocol.py): no local models, no
    draft (the server may run its own speculation). Keeps the probe result and reports failures
    once per kind. Its samples follow the server's own sampling defaults, and a completion at load
    would take a slot's cached prompt: it is probed instead."""
    target = draft = None
    exact_samples = warms_up = False

    def __init__(self, settings: RemoteSettings, max_cache_tokens: int = 4096):
        self.settings = settings
        self.config = RemoteConfig(target=settings.url, max_cache_tokens=max_cache_tokens)
        self.remote = RemoteTarget(settings)
        self.health = Health(backend="remote", url=settings.base_url)
        self._lock = threading.Lock()

    @property
    def info(self) -> ServerInfo | None:
        return self.remote.info

    def ensure_probed(self) -> ServerInfo:
        with self._lock:
            return self.remote.info or self.remote.probe()

    def check(self, tell: Callable[[str, bool], None] | None = None) -> None:
        """Probe the server now (at start-up); a failure is recorded and told as a request's is
        (`tell(message, is_error)`)."""
        try:
            self.ensure_probed()
        except RemoteError as err:
            if self.health.failed(err) and tell:
                tell(str(err), True)
            return
        if self.health.worked() and tell:
            tell(f"remote target {self.settings.base_url} answers again", False)

    def generate(self, prompt: InfillPrompt | TextPrompt, settings: GenerationSettings,
                 cancel: threading.Event | None = None, stop_check: StopCheck | None = None,
                 extra: dict | None = None) -> RemoteResult:
        """Stream the remote's answer until it ends, the stop check decides, the budget is spent
        or `cancel` is set; the HTTP stream is closed in every case. Raises RemoteError."""
        t0 = time.perf_counter()
        stats = GenerationStats()
        timings: dict = {}
        text, reason, ends = "", "eos", []
        try:
            self.ensure_probed()
            pieces = self.remote.stream(prompt, settings, timings, extra)
            try:
                for piece in pieces:
                    text += piece
                    ends.append(len(text))
                    stats.new_tokens += 1      # llama.cpp and vLLM stream one token per event
                    if cancel is not None and cancel.is_set():
                        reason = "cancelled"
                        break
                    if stop_check is not None:
                        stop = stop_check(text)
                        if stop is not None:
                            text, reason = text[:stop.chars], stop.reason
                            break
                    if settings.time_budget_ms and (time.perf_counter() - t0) * 1000 >= settings.time_budget_ms:
                        reason = "time_budget"
                        break
                else:
                    if stats.new_tokens >= settings.max_new_tokens:
                        reason = "max_tokens"
            finally:
                pieces.close()     # leaves the `with client.stream(...)`: the connection closes
        except RemoteError as e:
            if cancel is not None and cancel.is_set():
                return RemoteResult(text, [], "cancelled", stats, piece_ends=ends)
            self.remote.info = None if e.kind in ("unreachable", "not_found") else self.remote.info
            raise
        stats.latency_ms = (time.perf_counter() - t0) * 1000
        stats.prefill_tokens = int(timings.get("prompt_n", 0) or 0)
        stats.reused_tokens = int(timings.get("cache_n", 0) or 0)
        stats.prefill_ms = float(timings.get("prompt_ms", 0.0) or 0.0)
        return RemoteResult(text, [], reason, stats, piece_ends=ends)

    def decode(self, prompt: Prompt, settings: GenerationSettings, cancel: threading.Event | None = None,
               stop_check: StopCheck | None = None) -> RemoteResult:
        info = self.ensure_probed()
        try:
            built = prompt.server(info)
        except ValueError as exc:      # a prompt this server's model cannot take (e.g. its family)
            raise RemoteError("config", str(exc)) from None
        result = self.generate(built, settings, cancel=cancel, stop_check=stop_check)
        result.figures.update(backend=info.backend, remote_model=info.model,
                              prompt_shared_tokens=result.stats.reused_tokens)
        return result

    def tokens_covering(self, result: RemoteResult, chars: int) -> int:
        return result.pieces_covering(chars)

    def warm_lookup(self, texts, stop=lambda: False) -> int:
        return 0

    def summary(self) -> dict:
        h, info = self.health, self.info
        return {"remote": {"url": self.settings.base_url, "backend": info.backend if info else None,
                           "model": info.model if info else None, "failing": h.failing,
                           "last_error": h.last_error, "failures": dict(h.failures)}}

    def clear_caches(self) -> None:
        pass

    def close(self) -> None:
        self.remote.close()
