"""Proposers: what turns a rendered prompt into a new revision's code.

Two kinds, chosen with `--proposer`:

- `builtin:mutate` (no network, no LLM): new values for the Triton tuning parameters of the
  parent (harness.evolve.mutate). It returns the child's bytes itself; its reply, kept with the
  step, lists the changes.
- any other string is a command line (split with shlex, run without a shell), for example
  `llm -m gpt-4o` or `python my_agent.py`. It gets the prompt on stdin, answers on stdout in the
  reply format of prompts/_reply_format.j2 (a whole file in a fenced block, or SEARCH/REPLACE
  blocks), and must finish within the time limit: on expiry its whole process group is killed
  (it runs in a session of its own) and the step fails as `proposer_timeout`. A non-zero exit
  status or an empty reply fails the step as `proposer_failed`. Its environment has
  HARNESS_STEP_SEED (the step's seed, `<experiment seed>:<generation>`), so that a scripted
  proposer can be reproducible too. Whatever it writes on stderr is kept with the step (the last
  MAX_STDERR_BYTES bytes).

Several proposals may be in flight at once (`harness evolve --parallel K`): `propose` is called
from K threads; `cancel` kills every command still running (Ctrl-C).

The metadata convention: a proposer may report what the step cost and what it did in one line
of JSON, either as the last non-empty line of stdout or as any line of stderr (the last one
wins), starting with `HARNESS-META `:

    HARNESS-META {"summary": "unroll the kw loop", "tokens": 1834, "cost": 0.0121, "model": "x"}

`summary` (a string) becomes the child's message, `tokens` (an integer) and `cost` (a number,
in the currency the proposer uses) are stored with the step; other keys are kept as they are.
The line is taken out of the reply. A meta line that is not such a JSON object fails the step:
a proposer that means to report something should learn that it did not get through.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError, validation_message
from harness.evolve.mutate import mutate_candidate
from harness.evolve.outcomes import ProposerFailed, ProposerTimeout, StepFailed

BUILTIN_MUTATE = "builtin:mutate"
BUILTINS = (BUILTIN_MUTATE,)
META_PREFIX = "HARNESS-META "
DEFAULT_TIMEOUT_S = 600.0
MAX_STDERR_BYTES = 64 * 1024


@dataclass(frozen=True)
class ProposalRequest:
    prompt: str  # the full text an external proposer reads on stdin
    parent_code: bytes
    seed: str  # per step, so that a builtin proposer is reproducible and a resume repeats it
    known: Collection[str] = ()  # sha256 of the files the lineage has: a builtin never repeats one


@dataclass
class Proposal:
    reply: str  # what the proposer said, kept with the step
    content: bytes | None = None  # the child's code when the proposer returns the file itself
    summary: str = ""
    tokens: int | None = None
    cost: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""


class Proposer(Protocol):
    name: str
    # proposes at once, in the caller's thread (no process, no wait): the experiment asks it
    # while it holds its lock, so that what it knows (the lineage's files) does not depend on
    # the timing of other proposals
    immediate: bool

    def propose(self, request: ProposalRequest) -> Proposal: ...

    def cancel(self) -> None: ...


class ProposerMeta(BaseModel):
    """The JSON object of a `HARNESS-META` line."""

    model_config = ConfigDict(extra="allow")

    summary: str = ""
    tokens: int | None = Field(default=None, ge=0, strict=True)
    cost: float | None = Field(default=None, ge=0)


class MutateProposer:
    """`builtin:mutate`: the parent with new Triton tuning parameters (see harness.evolve.mutate)."""

    name = BUILTIN_MUTATE
    immediate = True

    def propose(self, request: ProposalRequest) -> Proposal:
        mutation = mutate_candidate(request.parent_code, request.seed, avoid=request.known)
        changes = list(dict.fromkeys((change.line, change.describe()) for change in mutation.changes))
        lines = [f"{self.name} (seed {request.seed!r}) made {len(changes)} change(s):"]
        lines += [f"- line {line}: {text}" for line, text in changes]
        if mutation.draws > 1:
            lines.append(f"({mutation.draws} draws: the earlier ones gave files the lineage already has)")
        return Proposal(
            reply="\n".join(lines) + "\n",
            content=mutation.content,
            summary=mutation.summary,
        )

    def cancel(self) -> None:
        pass


class CommandProposer:
    """An external command: the prompt on stdin, the reply on stdout, killed at `timeout_s`."""

    def __init__(self, command: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        try:
            self.argv = shlex.split(command)
        except ValueError as exc:
            raise HarnessError(f"cannot split the proposer command {command!r}: {exc}") from exc
        if not self.argv:
            raise HarnessError("the proposer command is empty")
        program = self.argv[0]
        if shutil.which(program) is None:
            raise HarnessError(
                f"proposer command not found: {program!r} (not on PATH, not an executable file)"
            )
        if timeout_s <= 0:
            raise HarnessError(f"the proposer time limit must be positive, not {timeout_s:g}")
        self.name = " ".join(self.argv)[:200]
        self.timeout_s = timeout_s
        self.immediate = False
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._cancelled = False

    def cancel(self) -> None:
        """Kill every proposal still running (their steps are asked again on resume)."""
        with self._lock:
            self._cancelled = True
            running = list(self._running)
        for process in running:  # the thread that waits on it reaps it
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def propose(self, request: ProposalRequest) -> Proposal:
        stdout, stderr_bytes, returncode = self._run(request.prompt, request.seed)
        stderr = _tail(stderr_bytes)
        try:
            return self._read(stdout, stderr_bytes, returncode, stderr)
        except StepFailed as exc:
            exc.stderr = stderr
            raise

    def _read(self, stdout: bytes, stderr: bytes, returncode: int, stderr_text: str) -> Proposal:
        if returncode != 0:
            last = _last_line(stderr.decode("utf-8", "replace"))
            how = (
                f"was killed by signal {-returncode}"
                if returncode < 0
                else f"exited with status {returncode}"
            )
            reason = f"the proposer {how}" + (f": {last}" if last else "")
            raise ProposerFailed(reason, reply=stdout.decode("utf-8", "replace"))
        text = stdout.decode("utf-8", "replace")
        try:
            reply, meta = split_meta(text, stderr.decode("utf-8", "replace"))
        except ProposerFailed as exc:
            exc.reply = text
            raise
        if not reply.strip():
            raise ProposerFailed("the proposer's reply is empty")
        extra = meta.model_extra or {}
        return Proposal(
            reply=reply,
            summary=" ".join(meta.summary.split())[:500],
            tokens=meta.tokens,
            cost=meta.cost,
            meta=dict(extra),
            stderr=stderr_text,
        )

    def _run(self, prompt: str, seed: str) -> tuple[bytes, bytes, int]:
        with self._lock:
            if self._cancelled:
                raise ProposerFailed("cancelled before it started (the experiment was interrupted)")
            process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so that a time limit kills all of it
                env={**os.environ, "HARNESS_STEP_SEED": seed},
            )
            self._running.add(process)
        try:
            stdout, stderr = process.communicate(prompt.encode("utf-8"), timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise ProposerTimeout(
                f"the proposer did not reply within {self.timeout_s:g} s; its process group was killed"
            ) from None
        finally:
            if process.poll() is None:  # interrupted (Ctrl-C) or timed out: leave nothing running
                _kill_group(process)
            with self._lock:
                self._running.discard(process)
        return stdout, stderr, process.returncode


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a descendant that left the group still holds the pipes
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        process.wait()


def split_meta(stdout: str, stderr: str) -> tuple[str, ProposerMeta]:
    """The reply without its `HARNESS-META` line, and the metadata (empty when there is none)."""
    lines = stdout.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    meta_text = None
    if lines and lines[-1].startswith(META_PREFIX):
        meta_text = lines.pop()[len(META_PREFIX) :]
        stdout = "\n".join(lines) + "\n"
    else:
        for line in stderr.split("\n"):
            if line.startswith(META_PREFIX):
                meta_text = line[len(META_PREFIX) :]
    if meta_text is None:
        return stdout, ProposerMeta()
    try:
        return stdout, ProposerMeta.model_validate_json(meta_text)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        message = validation_message(problem["msg"])
        detail = f"{where}: {message}" if where else message
        raise ProposerFailed(f"the proposer's HARNESS-META line is not valid ({detail})") from None


def _tail(stderr: bytes) -> str:
    text = stderr[-MAX_STDERR_BYTES:].decode("utf-8", "replace")
    return (
        text
        if len(stderr) <= MAX_STDERR_BYTES
        else f"[... {len(stderr) - MAX_STDERR_BYTES} bytes cut]\n{text}"
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().split("\n") if line.strip()]
    return lines[-1][:300] if lines else ""


def make_proposer(spec: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Proposer:
    """The proposer named by `--proposer`; HarnessError for an unknown builtin or a missing command."""
    spec = spec.strip()
    if spec.startswith("builtin:"):
        if spec == BUILTIN_MUTATE:
            return MutateProposer()
        raise HarnessError(f"unknown built-in proposer {spec!r} (built in: {', '.join(BUILTINS)})")
    return CommandProposer(spec, timeout_s)
