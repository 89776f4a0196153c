"""What every rank of a job is doing, said in its own log, for `torchdag diagnose` and
`torchdag status` (docs/failures.md, "Hangs and slow ranks"). record.py installs it for
any script (`launcher.recordErrors`), trainer/train.py for ours; TORCHDAG_RECORD=0: off.
Standard library and torch only, torch 2.1 on (the Workflow ships it in its ConfigMap).

Collectives come from PyTorch's flight recorder (nccl; gloo where torch records it; hccl
through torch_npu), switched on at 2000 entries where none of its switches is set; a group
it does not report is counted by our own light recorder of the Python collectives. Steps are
any torch.optim optimizer's. A thread looks once a second and says, one line each: that it
records; which collective the rank has waited in for TORCHDAG_RECORD_REPORT seconds (20);
where the main thread is when the rank entered none for as long; each TORCHDAG_RECORD_WINDOW
seconds (20, on the wall clock's multiples) the mean step and busy time a step (the part not
spent waiting for peers: from the last optimizer step's end to the step's last collective's
entry, plus the optimizer step, less the synchronous collectives in between); and on the
way out with an exception, the collective it failed in.
"""

from __future__ import annotations

import atexit
import bisect
import collections
import datetime
import faulthandler
import inspect
import json
import os
import pickle
import signal
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist

SWITCH = "TORCHDAG_RECORD"
REPORT_ENV, WINDOW_ENV = "TORCHDAG_RECORD_REPORT", "TORCHDAG_RECORD_WINDOW"
DEFAULT_REPORT_S, DEFAULT_WINDOW_S = 20.0, 20.0
TICK_S = 1.0
REPEAT = 3  # a state that lasts is reported again every REPEAT x the report delay
# torch's own name, its older nccl name, torch_npu's for hccl: none set -> all set
BUFFER_SWITCHES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_HCCL_TRACE_BUFFER_SIZE")
BUFFER_ENTRIES = "2000"
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "barrier",
               "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
               "scatter_object_list")
STEPS_KEPT = 4096
LIGHT_KEPT = 8192
STACK_FRAMES = 8

_recorder: Recorder | None = None
_local = threading.local()


def _seconds(env: dict, name: str, default: float) -> float:
    try:
        value = float(env.get(name, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def _iso(ns: int | float) -> str:
    moment = datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 4] -> "0-2, 4"."""
    out, ranks = [], sorted(ranks)
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(f"{ranks[i]}-{ranks[j]}" if j > i else str(ranks[i]))
        i = j + 1
    return ", ".join(out)


def _shape(args: tuple) -> list:
    first = args[0] if args else None
    if isinstance(first, (list, tuple)) and first:
        first = first[0]
    return list(first.shape) if hasattr(first, "shape") else []


class _Group:
    """The light recorder's count of one process group's collectives."""

    __slots__ = ("seq", "open")

    def __init__(self):
        self.seq = 0
        self.open: tuple | None = None  # (op, seq, entered ns, sizes) of a synchronous call in progress


class Recorder:
    def __init__(self, env):
        self.report_s = _seconds(env, REPORT_ENV, DEFAULT_REPORT_S)
        # the flight recorder's size as torch (or torch_npu) reads it: 0 is off
        size = env.get("TORCH_FR_BUFFER_SIZE") or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or \
            env.get("TORCH_HCCL_TRACE_BUFFER_SIZE") or BUFFER_ENTRIES
        self.flight_on = size.strip() not in ("0", "")
        self.window_s = _seconds(env, WINDOW_ENV, DEFAULT_WINDOW_S)
        self.groups: dict[str, _Group] = {}
        self.failed: tuple | None = None  # (group, call) of the Python collective that raised
        self.light_calls: collections.deque = collections.deque(maxlen=LIGHT_KEPT)  # (entered, returned|None) ns
        self.steps: collections.deque = collections.deque(maxlen=STEPS_KEPT)  # (pre, post) ns per optimizer step
        self.step_pre = 0
        self.step_count = 0
        self.rank = None
        self.window_start = 0.0
        self.thread = threading.Thread(target=self._run, name="torchdag-recorder", daemon=True)
        self.done = threading.Event()
        # what the thread last saw
        self.positions: tuple = ()
        self.changed = 0.0  # time.time() of the last change of any position or step
        self.next_report = 0.0
        self.window_end = 0.0
        self.flight_groups: set[str] = set()
        self.names: dict[str, str] = {}  # group name -> how a line names it

    # -- the light recorder (called on the training thread: kept small)

    def entered(self, op: str, group, args: tuple) -> tuple:
        name = _group_name(group)
        state = self.groups.get(name)
        if state is None:
            state = self.groups[name] = _Group()
        state.seq += 1
        now = time.time_ns()
        call = (op, state.seq, now, _shape(args))
        state.open = call
        return name, call

    def returned(self, key: tuple, async_op: bool) -> None:
        name, call = key
        state = self.groups[name]
        if state.open is call:
            state.open = None
        self.light_calls.append((call[2], None if async_op else time.time_ns()))

    # -- steps

    def step_started(self, *_args) -> None:
        self.step_pre = time.time_ns()

    def step_ended(self, *_args) -> None:
        self.steps.append((self.step_pre, time.time_ns()))
        self.step_count += 1

    # -- the thread

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        # Before the process group or the interpreter goes: a thread inside torch's C++ (a flight
        # recorder dump) then can abort the finished script (SIGABRT)
        self.done.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=10)

    def _run(self) -> None:
        while not self.done.wait(TICK_S):
            try:
                self.tick(time.time())
            except Exception as exc:  # noqa: BLE001 -- the job goes on without the recorder
                self.say(f"recording stopped: {type(exc).__name__}: {exc}")
                return

    def say(self, text: str) -> None:
        who = "?" if self.rank is None else self.rank
        print(f"[torchdag] rank {who} {text}", file=sys.stderr, flush=True)

    def tick(self, now: float) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            return
        if self.rank is None:
            self._begin(now)
        flight = self._flight_status()
        positions = tuple(sorted((name, enq, done) for name, (enq, done) in flight.items()))
        light = tuple(sorted((name, g.seq) for name, g in self.groups.items() if name not in flight))
        seen = (positions, light, self.step_count)
        if seen != self.positions:
            self.positions, self.changed, self.next_report = seen, now, now + self.report_s
        waiting = self._waiting(flight)
        if now >= self.next_report:
            if waiting:
                for line in self._waiting_lines(waiting, now, "waiting in", "for"):
                    self.say(line)
            else:
                self.say(self._outside_line(now))
            self.next_report = now + REPEAT * self.report_s
        if now >= self.window_end:
            self._window(now)

    def _begin(self, now: float) -> None:
        self.rank = dist.get_rank()
        self.changed, self.next_report = now, now + self.report_s
        self.window_end = (int(now // self.window_s) + 1) * self.window_s
        self.window_start = now
        backend = dist.get_backend()
        kind = "flight recorder" if self.flight_on and self._flight_dump(False) is not None else "own recorder"
        self.say(f"of {dist.get_world_size()}: recording collectives ({kind}, {backend}); report after "
                 f"{self.report_s:g} s, window {self.window_s:g} s")

    # -- the flight recorder

    def _flight_dump(self, entries: bool):
        """The flight recorder's dump of this process (entries, or only each group's status)."""
        c10d = getattr(torch._C, "_distributed_c10d", None)
        calls = []
        if entries and hasattr(c10d, "_dump_fr_trace"):  # pickle without stack traces: the cheapest
            calls.append(lambda: pickle.loads(c10d._dump_fr_trace(True, False, False)))
        for name in ("_dump_fr_trace_json", "_dump_nccl_trace_json"):
            dump = getattr(c10d, name, None)
            if dump is not None:
                calls.append(lambda dump=dump: json.loads(dump(entries, False)))
        npu = sys.modules.get("torch_npu")
        hccl = getattr(getattr(getattr(npu, "_C", None), "_distributed_c10d", None), "_dump_hccl_trace_json", None)
        if hccl is not None:
            calls.append(lambda: json.loads(hccl(entries, False)))
        for call in calls:
            try:
                found = call()
            except Exception:  # noqa: BLE001 -- not built in (nccl without CUDA), or not enabled
                continue
            if isinstance(found, dict) and "version" in found:
                return found
        return None

    def _flight_status(self) -> dict:
        """{group name: (last entered, last completed)} from the flight recorder's pg_status."""
        dump = self._flight_dump(False) if self.flight_on else None
        if dump is None:
            return {}
        out = {}
        for name, status in (dump.get("pg_status") or {}).items():
            try:
                out[str(name)] = (int(status.get("last_enqueued_collective", -1)),
                                  int(status.get("last_completed_collective", -1)))
            except (TypeError, ValueError):
                continue
        self.flight_groups |= set(out)
        return out

    # -- what a line says

    def _group_label(self, name: str, desc: str = "") -> str:
        if name not in self.names:
            try:
                c10d = dist.distributed_c10d
                world = c10d._get_default_group()
                groups = {n: pg for pg, n in c10d._world.pg_names.items()}
                pg = groups.get(name)
                if pg is world or desc == "default_pg":
                    self.names[name] = "the default group"
                elif pg is not None:
                    self.names[name] = f"group {name} (ranks {_ranges(dist.get_process_group_ranks(pg))})"
                else:
                    self.names[name] = f"group {name}"
            except Exception:  # noqa: BLE001 -- torch's internals moved: the bare name
                self.names[name] = f"group {name}"
        return self.names[name]

    def _waiting(self, flight: dict) -> list[tuple]:
        """(group, first pending seq, completed) of every group with a collective in progress."""
        out = [(name, done + 1, done, None) for name, (entered, done) in flight.items() if entered > done]
        for name, state in self.groups.items():
            call = state.open
            if name not in flight and call is not None:
                out.append((name, call[1], call[1] - 1, call))
        return out

    def _waiting_lines(self, waiting: list[tuple], now: float, verb: str, span: str) -> list[str]:
        details = {}
        if self.flight_on and any(call is None for *_, call in waiting):
            dump = self._flight_dump(True) or {}
            for entry in dump.get("entries") or []:
                group = entry.get("process_group") or ("", "")
                details[(str(group[0]), int(entry.get("collective_seq_id") or -1))] = entry
        lines = []
        for name, seq, done, call in waiting:
            if call is not None:
                op, _, entered, sizes = call
                label = self._group_label(name)
            else:
                entry = details.get((name, seq), {})
                op = str(entry.get("profiling_name") or "collective").split(":")[-1]
                entered = entry.get("time_created_ns") or int(self.changed * 1e9)
                sizes = entry.get("input_sizes") or []
                label = self._group_label(name, str((entry.get("process_group") or ("", ""))[1]))
            lines.append(f"{verb} {op} #{seq} of {label} {span} {int(now - entered / 1e9)} s (entered "
                         f"{_iso(entered)}; sizes {json.dumps(sizes, separators=(',', ':'))}; completed #{done})")
        return lines

    def _outside_line(self, now: float) -> str:
        last = [f"#{entered} of {self._group_label(name)}" for name, (entered, _) in
                sorted(self._flight_status().items()) if entered > 0]
        for name, state in sorted(self.groups.items()):
            if name not in self.flight_groups and state.seq:
                last.append(f"#{state.seq} of {self._group_label(name)}")
        return (f"outside any collective for {int(now - self.changed)} s (last {', '.join(last) or 'none yet'}); "
                f"main thread at {main_stack()}")

    def _window(self, now: float) -> None:
        end = self.window_end
        start = end - self.window_s
        self.window_end = (int(now // self.window_s) + 1) * self.window_s
        if start < self.window_start:  # this rank started within it: a part window says little
            return
        steps = list(self.steps)
        lo, hi = int(start * 1e9), int(end * 1e9)
        pairs = [(steps[i - 1], steps[i]) for i in range(1, len(steps)) if lo < steps[i][1] <= hi]
        if not pairs:
            return
        dump = (self._flight_dump(True) or {}) if self.flight_on else {}
        entered = sorted([entry.get("time_created_ns") or 0 for entry in dump.get("entries") or []]
                         + [e for e, _ in self.light_calls])
        waits = sorted((e, r) for e, r in self.light_calls if r is not None)
        starts = [e for e, _ in waits]
        busy = []
        for (_, before), (pre, post) in pairs:
            i = bisect.bisect_right(entered, pre) - 1
            if i < 0 or entered[i] <= before:
                continue
            last = entered[i]
            waited = 0
            j = max(0, bisect.bisect_left(starts, before) - 1)  # one call may have begun before
            while j < len(waits) and waits[j][0] < last:
                e, r = waits[j]
                waited += max(0, min(r, last) - max(e, before))
                j += 1
            busy.append(last - before - waited + post - pre)
        # means, not medians: a CPU quota freezes a rank for the rest of each period, so only some
        # of its steps are long, yet together they make it the one its peers wait for
        step = statistics.fmean(post - before for (_, before), (_, post) in pairs) / 1e6
        said = f"{statistics.fmean(busy) / 1e6:.1f}" if busy else "-"
        self.say(f"window {_iso(hi)[:19]}Z {self.window_s:g} s: {len(pairs)} steps, step {step:.1f} ms, "
                 f"busy {said} ms")

    def failure_lines(self, now: float, collective_error: bool = False) -> list[str]:
        """The collective this rank failed in. gloo counts a collective that raised (its timeout)
        as completed: then the flight recorder's entry of the Python call that raised, else, for
        an error of the communication library (DDP's all-reduce, from C++), the last entered."""
        if self.rank is None or not (dist.is_available() and dist.is_initialized()):
            return []
        flight = self._flight_status()
        waiting = self._waiting(flight)
        if waiting:
            return self._waiting_lines(waiting, now, "failed in", "after")
        entries = [e for e in ((self._flight_dump(True) or {}).get("entries") or []) if flight
                   and int(e.get("collective_seq_id") or 0) > 0]
        if self.failed is not None:
            name, call = self.failed
            entries = [e for e in entries if str((e.get("process_group") or ("",))[0]) == name
                       and (e.get("time_created_ns") or 0) >= call[2]]
            if not entries:
                return self._waiting_lines([(name, call[1], call[1] - 1, call)], now, "failed in", "after")
            last = entries[0]
        elif collective_error and entries:
            last = max(entries, key=lambda e: e.get("time_created_ns") or 0)
        else:
            return []
        name, seq = str((last.get("process_group") or ("",))[0]), int(last["collective_seq_id"])
        return self._waiting_lines([(name, seq, seq - 1, None)], now, "failed in", "after")


def main_stack(limit: int = STACK_FRAMES) -> str:
    """The main thread's innermost frames, `func (file:line) < caller (file:line)`."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    out = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        out.append(f"{code.co_name} ({code.co_filename}:{frame.f_lineno})")
        frame = frame.f_back
    return " < ".join(out) or "(no Python frame)"


def _group_name(group) -> str:
    try:
        c10d = dist.distributed_c10d
        return str(c10d._world.pg_names[group if group is not None else c10d._get_default_group()])
    except Exception:  # noqa: BLE001 -- not a group torch knows (yet): named by identity
        return "0" if group is None else f"id{id(group)}"


def _wrap(op: str, fn):
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    group_at = params.index("group") if "group" in params else None
    async_at = params.index("async_op") if "async_op" in params else None

    def recorded(*args, **kwargs):
        recorder = _recorder
        if recorder is None or getattr(_local, "inside", False):  # counted once: all_gather_object's all_gather
            return fn(*args, **kwargs)
        group = kwargs.get("group", args[group_at] if group_at is not None and len(args) > group_at else None)
        async_op = kwargs.get("async_op", args[async_at] if async_at is not None and len(args) > async_at else False)
        key = recorder.entered(op, group, args)
        _local.inside = True
        try:
            return fn(*args, **kwargs)
        except BaseException:
            recorder.failed = key  # said on the way out (report_failure), though no longer in progress
            raise
        finally:
            _local.inside = False
            recorder.returned(key, bool(async_op))

    recorded.__wrapped__ = fn
    recorded.__name__ = getattr(fn, "__name__", op)
    recorded.__doc__ = getattr(fn, "__doc__", None)
    recorded._torchdag_recorded = True
    return recorded


def install(env=None) -> Recorder | None:
    """Start recording in this process (once; before the process group is created, so that the
    flight recorder's switches count). None when TORCHDAG_RECORD=0."""
    global _recorder
    env = os.environ if env is None else env
    if _recorder is not None:
        return _recorder
    if env.get(SWITCH, "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    already = getattr(dist, "_torchdag_recorder", None)  # another copy of this file installed it
    if already is not None:
        _recorder = already
        return already
    if not any(name in env for name in BUFFER_SWITCHES):
        # torch from 2.6 reads TORCH_FR_BUFFER_SIZE (and warns about the older name)
        newer = hasattr(getattr(torch._C, "_distributed_c10d", None), "_dump_fr_trace_json")
        env["TORCH_FR_BUFFER_SIZE" if newer else "TORCH_NCCL_TRACE_BUFFER_SIZE"] = BUFFER_ENTRIES
        env["TORCH_HCCL_TRACE_BUFFER_SIZE"] = BUFFER_ENTRIES
    recorder = Recorder(env)
    _recorder = recorder
    dist._torchdag_recorder = recorder
    if dist.is_available():
        c10d = dist.distributed_c10d
        for op in COLLECTIVES:
            fn = getattr(c10d, op, None)
            if fn is None or getattr(fn, "_torchdag_recorded", False):
                continue
            wrapped = _wrap(op, fn)
            setattr(c10d, op, wrapped)
            if getattr(dist, op, None) is fn:
                setattr(dist, op, wrapped)
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(recorder.step_started)
        register_optimizer_step_post_hook(recorder.step_ended)
    except ImportError:  # a torch without global optimizer hooks: no step times
        pass
    try:
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
            faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, RuntimeError):
        pass
    destroy = getattr(dist.distributed_c10d, "destroy_process_group", None) if dist.is_available() else None
    if destroy is not None and not getattr(destroy, "_torchdag_recorded", False):
        def destroy_process_group(group=None):
            if group is None:  # every group goes: the recorder first
                recorder.stop()
            return destroy(group)
        destroy_process_group.__wrapped__, destroy_process_group._torchdag_recorded = destroy, True
        dist.distributed_c10d.destroy_process_group = dist.destroy_process_group = destroy_process_group
    atexit.register(recorder.stop)
    recorder.start()
    return recorder


COLLECTIVE_ERROR = ("DistBackendError", "DistNetworkError", "DistError")
COLLECTIVE_TEXT = ("gloo", "nccl", "NCCL", "hccl", "HCCL", "Timed out", "timed out", "Connection closed",
                   "Connection reset", "collective")


def report_failure(exc: BaseException | None = None) -> None:
    """On the way out with an exception: the collective this rank failed in (a collective's
    timeout, a lost peer), as the same kind of line its peers' records use."""
    recorder = _recorder
    if recorder is None:
        return
    exc = exc if exc is not None else sys.exc_info()[1]
    communication = exc is not None and (type(exc).__name__ in COLLECTIVE_ERROR or
                                         any(word in str(exc) for word in COLLECTIVE_TEXT))
    try:
        for line in recorder.failure_lines(time.time(), communication):
            recorder.say(line)
    except Exception as err:  # noqa: BLE001 -- exiting anyway; said, not raised
        recorder.say(f"recording could not say where it failed: {type(err).__name__}: {err}")
