"""Offline text-to-speech through the engines Debian ships: espeak-ng and flite (run as subprocesses)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass

import numpy as np

from papershelf.errors import InputError, PapershelfError

# Debian package that provides each engine's command.
DEBIAN_PACKAGES = {"espeak-ng": "espeak-ng", "flite": "flite"}

# espeak-ng English accents (each is a voice file of espeak-ng-data) and the voice variants used as
# speaker identities; a speaker is ``accent+variant``.
ESPEAK_ACCENTS = (
    "en-us", "en-gb", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029",
    "en-us-nyc",
)  # fmt: skip
ESPEAK_VARIANTS = (
    "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2",
    "klatt3", "Alex", "Annie", "Andy", "adam", "belinda", "david", "linda", "max", "john", "steph",
    "quincy", "robert", "shelby", "travis",
)  # fmt: skip
FLITE_VOICES = ("kal", "kal16", "awb", "rms", "slt")


@dataclass(frozen=True)
class Voice:
    """A speaker: an engine and a voice name (``accent+variant`` for espeak-ng)."""

    engine: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.engine}:{self.name}"


def all_voices() -> list[Voice]:
    """Every supported voice, in a fixed order."""
    voices = [Voice("espeak-ng", f"{a}+{v}") for a in ESPEAK_ACCENTS for v in ESPEAK_VARIANTS]
    return voices + [Voice("flite", v) for v in FLITE_VOICES]


def parse_voice(spec: str) -> Voice:
    """``engine:name`` to a :class:`Voice`; an unknown voice is rejected with the supported list."""
    known = {v.id: v for v in all_voices()}
    if spec not in known:
        raise InputError(
            f"unknown voice {spec!r}; supported: espeak-ng:<accent>+<variant> with accent in "
            f"{', '.join(ESPEAK_ACCENTS)} and variant in {', '.join(ESPEAK_VARIANTS)}; "
            f"or flite:<voice> with voice in {', '.join(FLITE_VOICES)}"
        )
    return known[spec]


def check_engines(engines=("espeak-ng", "flite")) -> None:
    """Raise one clear error naming the Debian packages to install when an engine is missing."""
    unknown = [e for e in engines if e not in DEBIAN_PACKAGES]
    if unknown:
        raise InputError(f"unknown engine(s) {unknown}; supported: {', '.join(DEBIAN_PACKAGES)}")
    missing = [e for e in engines if shutil.which(e) is None]
    if missing:
        packages = " ".join(DEBIAN_PACKAGES[e] for e in missing)
        raise PapershelfError(
            f"text-to-speech engine(s) not found on PATH: {', '.join(missing)}; "
            f"install the Debian package(s): apt-get install -y {packages}"
        )


def engine_versions(engines=("espeak-ng", "flite")) -> dict[str, str]:
    """The version line of each engine (recorded in a corpus manifest)."""
    out = {}
    for engine in engines:
        flag = "--version"
        proc = subprocess.run([engine, flag], capture_output=True, text=True, check=False)
        out[engine] = (
            (proc.stdout or proc.stderr).strip().splitlines()[0] if (proc.stdout or proc.stderr) else ""
        )
    return out


def _read_wav(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as handle:
        rate = handle.getframerate()
        if handle.getsampwidth() != 2 or handle.getnchannels() != 1:
            raise PapershelfError("the TTS engine wrote a WAV file that is not 16-bit mono")
        frames = handle.readframes(handle.getnframes())
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0, rate


def synthesize(voice: Voice, text: str, *, rate: float = 1.0, pitch: int = 50) -> tuple[np.ndarray, int]:
    """Speak ``text`` with ``voice``: a float32 waveform in [-1, 1] and the engine's sample rate.

    ``rate`` scales the speaking rate (1.0 = 175 words per minute for espeak-ng, flite's default
    duration for flite); ``pitch`` is espeak-ng's pitch (0-99; flite ignores it).
    """
    check_engines((voice.engine,))
    if not 0.5 <= rate <= 2.0:
        raise InputError(f"rate must be in [0.5, 2.0], got {rate}")
    if voice.engine == "espeak-ng":
        cmd = ["espeak-ng", "-v", voice.name, "-s", str(round(175 * rate)), "-p", str(int(pitch)), "--stdout"]
        proc = subprocess.run([*cmd, text], capture_output=True, check=False)
        if proc.returncode != 0 or not proc.stdout:
            raise PapershelfError(f"espeak-ng failed for voice {voice.name}: {proc.stderr.decode()[:200]}")
        return _read_wav(proc.stdout)
    fd, path = tempfile.mkstemp(suffix=".wav")
    os.close(fd)
    try:
        cmd = ["flite", "-voice", voice.name, "--setf", f"duration_stretch={1.0 / rate:.4f}", "-t", text]
        proc = subprocess.run([*cmd, "-o", path], capture_output=True, check=False)
        if proc.returncode != 0:
            raise PapershelfError(f"flite failed for voice {voice.name}: {proc.stderr.decode()[:200]}")
        with open(path, "rb") as handle:
            return _read_wav(handle.read())
    finally:
        os.unlink(path)
