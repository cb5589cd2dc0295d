"""Quantities as people write them: ``10Gbps``, ``1.25GB/s``, ``80ms``, ``25MB``, ``100MiB``, ``25M``.

Parsers return plain SI numbers (bits per second, seconds, bytes, counts) and raise ``ValueError``
with the offending text in the message. Formatters turn SI numbers back into short readable text.

Conventions (as in nccl-tests and network gear): a lowercase ``b`` is a bit, an uppercase ``B`` a
byte, so ``10Gbps`` = 10·10⁹ bit/s = 1.25·10⁹ B/s = ``1.25GB/s``. SI prefixes (k, M, G, T) are
powers of 1000; binary ones (Ki, Mi, Gi, Ti) powers of 1024.
"""

from __future__ import annotations

import math
import re

SI_PREFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
BINARY_PREFIXES = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
              "sec": 1.0, "min": 60.0, "h": 3600.0}
COUNT_SUFFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}

_NUMBER = r"(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_QUANTITY = re.compile(_NUMBER + r"\s*(?P<unit>[^\d\s].*)?$", re.ASCII)  # 0-9 only: not "１０"


def _split(text: str, what: str) -> tuple[float, str]:
    """Split ``'10Gbps'`` into ``(10.0, 'Gbps')``; reject empty, NaN, infinite and negative values."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty {what}: {text!r}")
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"not a {what}: {text!r}")
    value = float(match.group("num"))
    if not math.isfinite(value):
        raise ValueError(f"not a finite {what}: {text!r}")
    if value < 0:
        raise ValueError(f"negative {what}: {text!r}")
    return value, (match.group("unit") or "").strip()


def _finite(value: float, text: str, what: str) -> float:
    """``value``, the number of ``text`` times its unit; ``ValueError`` if that overflowed."""
    if not math.isfinite(value):
        raise ValueError(f"not a finite {what}: {text!r}")
    return value


def _prefix_factor(prefix: str, text: str, what: str) -> float:
    if prefix in BINARY_PREFIXES:
        return BINARY_PREFIXES[prefix]
    if prefix in SI_PREFIXES:
        return SI_PREFIXES[prefix]
    raise ValueError(f"unknown unit prefix {prefix!r} in {what} {text!r}")


def parse_bandwidth(text: str) -> float:
    """Bandwidth in bits per second: ``10Gbps``, ``100Mbit/s``, ``1.25GB/s``, ``100MiB/s``."""
    value, unit = _split(text, "bandwidth")
    match = re.fullmatch(r"(?P<prefix>[kKMGTP]i?|)(?P<base>bps|bit/s|bits/s|b/s|Bps|B/s|byte/s|bytes/s)",
                         unit)
    if not match:
        raise ValueError(f"bandwidth {text!r} needs a unit such as Gbps, Mbit/s or GB/s")
    factor = _prefix_factor(match.group("prefix"), text, "bandwidth")
    bits_per_unit = 1.0 if match.group("base") in ("bps", "bit/s", "bits/s", "b/s") else 8.0
    return _finite(value * factor * bits_per_unit, text, "bandwidth")


def parse_time(text: str) -> float:
    """A duration in seconds: ``5us``, ``0.5ms``, ``80ms``, ``1s``. A bare ``0`` is allowed."""
    value, unit = _split(text, "time")
    if unit == "" and value == 0:
        return 0.0
    if unit not in TIME_UNITS:
        raise ValueError(f"time {text!r} needs a unit such as us, ms or s")
    factor = TIME_UNITS[unit]
    # Divide by 10^k for sub-second units, so that 5us is exactly the float 5e-06.
    return _finite(value / round(1 / factor) if factor < 1 else value * factor, text, "time")


def parse_size(text: str) -> int:
    """A size in bytes: ``25MB``, ``100MiB``, ``64KB``, ``512B``. A bare ``0`` is allowed."""
    value, unit = _split(text, "size")
    if unit == "" and value == 0:
        return 0
    match = re.fullmatch(r"(?P<prefix>[kKMGTP]i?|)(?:B|bytes?)", unit)
    if not match:
        raise ValueError(f"size {text!r} needs a unit such as B, KB, MB or MiB")
    size = _finite(value * _prefix_factor(match.group("prefix"), text, "size"), text, "size")
    if size != round(size):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(round(size))


def parse_count(text: str) -> int:
    """A count such as a number of parameters: ``25M``, ``1.5B`` (billion), ``340000``."""
    value, unit = _split(text, "count")
    if unit not in COUNT_SUFFIXES:
        raise ValueError(f"count {text!r}: unknown suffix {unit!r} (use K, M or B)")
    count = _finite(value * COUNT_SUFFIXES[unit], text, "count")
    if count != round(count):
        raise ValueError(f"count {text!r} is not a whole number")
    return int(round(count))


def _scaled(value: float, steps: list[tuple[float, str]], digits: int) -> str:
    for factor, name in steps:
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {name}"
    factor, name = steps[-1]
    return f"{value / factor:.{digits}g} {name}"


def format_bytes(n_bytes: float, digits: int = 3) -> str:
    """``102400000`` -> ``'102 MB'`` (SI, as nccl-tests)."""
    return _scaled(n_bytes, [(1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"),
                             (1, "B")], digits)


def format_time(seconds: float, digits: int = 3) -> str:
    """``0.0123`` -> ``'12.3 ms'``."""
    if seconds == 0:
        return "0 s"
    return _scaled(seconds, [(1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")], digits)


def format_rate_Bps(bytes_per_s: float, digits: int = 3) -> str:
    """``1.25e9`` -> ``'1.25 GB/s'``."""
    return _scaled(bytes_per_s, [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s"),
                                 (1, "B/s")], digits)


def format_bandwidth_bps(bits_per_s: float, digits: int = 3) -> str:
    """``1e10`` -> ``'10 Gbps'``."""
    return _scaled(bits_per_s, [(1e12, "Tbps"), (1e9, "Gbps"), (1e6, "Mbps"), (1e3, "kbps"),
                                (1, "bps")], digits)


def format_count(count: float, digits: int = 3) -> str:
    """``25557032`` -> ``'25.6M'``."""
    for factor, name in [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")]:
        if abs(count) >= factor:
            return f"{count / factor:.{digits}g}{name}"
    return f"{count:g}"
