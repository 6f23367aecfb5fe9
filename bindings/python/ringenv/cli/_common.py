"""What ``ringenv tune`` and ``benches/`` share: argument types, the env an ``ENV`` argument names,
machine information, and the consoles."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import platform
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ringenv._checks import SPIN_US_MAX
from ringenv._plan import usable_cores

if TYPE_CHECKING:
    from ringenv.registration import ResolvedId


class UsageError(Exception):
    """A bad command line: reported as one line on stderr, exit status 2."""


class RunError(Exception):
    """A failure while measuring (an env that cannot be built or stepped): exit status 1."""



def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive, finite number of seconds, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**63), got {value}")
    return value


def workers_list(text: str):
    """``auto`` or a comma-separated list of integers >= 0 (0: no worker process)."""
    if text.strip().lower() == "auto":
        return "auto"
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise argparse.ArgumentTypeError(
                f"{text!r} is not 'auto' or a comma-separated list of integers >= 0 (e.g. 0,1,2,4; 0: no worker "
                f"process); bad entry {part!r}")
        values.append(int(part))
    return sorted(set(values))


def spin_microseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of microseconds") from None
    if not math.isfinite(value) or not 0 <= value <= SPIN_US_MAX:
        raise argparse.ArgumentTypeError(f"must be a number of microseconds from 0 to {SPIN_US_MAX:,} (0: never "
                                         f"spin), got {text!r}")
    return value


def json_object(text: str) -> Dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object such as '{{\"num_blocks\": 5}}', got {text!r}")
    return value


def auto_workers(cores: int, num_envs: int) -> List[int]:
    """1, 2, 4, ... up to and including ``cores``, plus ``cores``; none above ``num_envs``."""
    values, w = set(), 1
    while w <= cores:
        values.add(w)
        w *= 2
    values.add(cores)
    return sorted(v for v in values if v <= num_envs)


def check_output_path(path: Optional[str], argument: str) -> None:
    """Raises :class:`UsageError` naming ``argument`` unless a file can be written at ``path``
    (``None``: no output), checked before anything is measured."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"argument {argument}: directory {parent!r} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"argument {argument}: {path!r} is a directory; give a file path")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".ringenv-check-"):
            pass
    except OSError as e:
        raise UsageError(f"argument {argument}: cannot write in directory {parent!r} ({e.strerror or e})") from None


def check_device(device: str) -> None:
    """Raises :class:`UsageError` naming ``--device`` unless ``parse_device`` accepts ``device``
    and, for CUDA, a device can be used here."""
    from ringenv._staging import parse_device
    from ringenv.errors import CudaUnavailableError

    try:
        parse_device(device)
    except (ValueError, TypeError, CudaUnavailableError) as e:
        raise UsageError(f"argument --device: {device!r} cannot be used: {e}") from None


def whole_workers_reason(num_envs: int, num_workers: int, batch_size: int, *, inline: bool = False) -> Optional[str]:
    """Why ``num_workers`` workers (plus one block with ``inline``) cannot serve async batches of
    ``batch_size`` of ``num_envs`` envs (``check_batch_size``'s rule), short enough for a table
    cell; ``None`` when they can or there are no async batches."""
    from ringenv._batches import check_batch_size

    if batch_size >= num_envs:
        return None
    blocks = num_workers + int(inline)
    if num_workers == 0:
        return f"0 workers step all {num_envs} envs in one block: async batches need worker processes"
    try:
        check_batch_size(num_envs, blocks, batch_size)
    except ValueError:
        if inline:
            over = f"{blocks} blocks ({num_workers} worker{'s' if num_workers != 1 else ''} + inline)"
            if num_envs % blocks:
                return f"{num_envs} envs do not split evenly over {over}"
            return f"batch {batch_size} is not whole blocks of {num_envs // blocks} envs each over {over}"
        if num_envs % blocks:
            return f"{num_envs} envs do not split evenly over {num_workers} workers"
        return f"batch {batch_size} is not whole workers of {num_envs // num_workers} envs each"
    return None


def vector_options(num_envs: int, num_workers: int, inline: bool = False, batch_size: Optional[int] = None,
                   device: str = "cpu", spin_us: Optional[float] = None) -> Dict[str, Any]:
    """The ``AsyncVectorEnv`` keyword arguments of a ``ringenv tune`` configuration, as measured and
    as recommended: ``num_workers`` and ``inline`` always, the others where not the default."""
    options: Dict[str, Any] = {"num_workers": num_workers, "inline": bool(inline)}
    if batch_size is not None and batch_size != num_envs:
        options["batch_size"] = batch_size
    if device != "cpu":
        options["device"] = device
    if spin_us is not None:
        options["spin_us"] = spin_us
    return options



@dataclass
class EnvTarget:
    """An env named on the command line: ``kind`` ``"builtin"`` (a Rust env, ringenv's own or a
    ``worker`` binary's) or ``"gymnasium"``, an id resolved as ``env``; or ``"factory"``, whose
    ``python_factory`` builds one Python env."""

    name: str
    kind: str
    kwargs: Dict[str, Any] = field(default_factory=dict)
    python_factory: Optional[Callable[[], Any]] = None
    worker: Optional[str] = None
    env: Optional[ResolvedId] = None

    @property
    def label(self) -> str:
        if self.worker is not None:
            return f"{self.name} (Rust, worker binary {self.worker})"
        return {"builtin": f"{self.name} (ringenv built-in, Rust)",
                "gymnasium": f"{self.name} (Gymnasium, Python)",
                "factory": f"{self.name} (factory, Python)"}[self.kind]

    @property
    def steps_inline(self) -> bool:
        """Whether the main process can step a share of these envs (not a worker binary's)."""
        return self.worker is None

    def make_ringenv(self, num_envs: int, num_workers: int, batch_size: Optional[int] = None,
                     device: str = "cpu", spin_us: Optional[float] = None, *, inline: bool = False):
        """A ``ringenv.AsyncVectorEnv`` of ``num_envs`` copies with :func:`vector_options`'
        settings, every other one ringenv's default."""
        import ringenv

        options = vector_options(num_envs, num_workers, inline, batch_size, device, spin_us)
        if self.env is not None:
            return self.env.make(num_envs, options)
        assert self.python_factory is not None, "a factory target has a Python factory"
        return ringenv.AsyncVectorEnv([self.python_factory] * num_envs, **options)


def _factory(text: str) -> Optional[Callable[..., Any]]:
    """The callable ``text`` names as ``module:callable`` (``None`` where it names none)."""
    module_name, colon, attr = text.partition(":")
    if not colon:
        return None
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return obj if callable(obj) else None


def resolve_env(text: str, kwargs: Optional[Dict[str, Any]] = None, *, prefer_builtin: bool = True) -> EnvTarget:
    """The env ``text`` names: an env id as ``ringenv.make_vec`` resolves it
    (:func:`ringenv.registration.resolve_id`: a worker binary's ``PATH:ID``, a built-in
    (preferred unless ``prefer_builtin`` is false), a registered or ``module:Id`` Gymnasium
    id), else a ``module:callable`` factory. Raises :class:`UsageError` naming ``ENV`` otherwise."""
    import gymnasium as gym

    import ringenv
    from ringenv.registration import WorkerIdMissing, describe_worker, resolve_id

    kwargs = dict(kwargs or {})
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, so that local modules are found
    try:
        env = resolve_id(text, kwargs, prefer_builtin=prefer_builtin)
    except WorkerIdMissing as e:  # a worker binary's path without :ID (its message lists the ids)
        raise UsageError(f"argument ENV: {e}") from None
    except gym.error.Error as e:
        factory = _factory(text)
        if factory is not None:
            return EnvTarget(text, "factory", kwargs, functools.partial(factory, **kwargs) if kwargs else factory)
        builtin = ", ".join(ringenv.builtin_env_ids())
        raise UsageError(f"argument ENV: unknown environment id {text!r}: {e} (not a ringenv built-in ({builtin}), "
                         "not a registered Gymnasium id, not module:callable; an id that a package registers when "
                         "imported is named after it, as gymnasium.make takes it: PACKAGE:ID, e.g. "
                         "minigrid:MiniGrid-DoorKey-8x8-v0)") from None
    except Exception as e:  # a PATH:ID whose PATH is no program, a module that cannot be imported
        raise UsageError(f"argument ENV: {text!r}: {e}") from None
    if env.rust_id is None:
        assert env.spec is not None, "a Python env has a spec"
        return EnvTarget(env.spec.id, "gymnasium", env.kwargs, env=env)
    if env.worker is not None:
        try:
            describe_worker(env.worker, env.rust_id, env.kwargs)  # the binary's own error, before any measurement
        except (OSError, ValueError, TypeError) as e:
            raise UsageError(f"argument ENV: {text!r}: {e}") from None
        # the binary as the user spelled it, where they gave PATH:ID
        shown = text[:-len(env.rust_id) - 1] if text.endswith(f":{env.rust_id}") else env.worker
        return EnvTarget(env.rust_id, "builtin", env.kwargs, worker=shown, env=env)
    return EnvTarget(env.rust_id, "builtin", env.kwargs, env=env)


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info() -> Dict[str, Any]:
    import gymnasium as gym
    import numpy as np

    import ringenv

    return {
        "cores": usable_cores(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "ringenv": ringenv.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
    }


def machine_line(info: Dict[str, Any]) -> str:
    return (f"ringenv {info['ringenv']} on {info['machine']}, {info['cores']} cores"
            f"{' (' + info['cpu_model'] + ')' if info.get('cpu_model') else ''}, Python {info['python']}, "
            f"gymnasium {info['gymnasium']}")


def consoles():
    """(stdout console for tables, stderr console for progress); no colour codes off a terminal."""
    from rich.console import Console

    def make(stream):
        if stream.isatty():
            return Console(file=stream, highlight=False)
        return Console(file=stream, no_color=True, highlight=False, emoji=False)

    return make(sys.stdout), make(sys.stderr)


def print_table(console, table) -> None:
    """Prints a table at its natural width, so rich never cuts a figure short on a narrow terminal."""
    from rich.console import Console

    if console.width < 200:
        console = Console(file=console.file, width=200, highlight=False, no_color=console.no_color,
                          force_terminal=console.is_terminal, emoji=False)
    console.print(table)


def write_json(path: str, data: Dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)
