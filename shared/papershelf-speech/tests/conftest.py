"""A tiny corpus built once per session (both engines, every split), shared by the tests."""

import shutil

import pytest
from papershelf_speech.corpus import CorpusConfig, build_corpus

from papershelf.errors import PapershelfError

# The Makefile installs the TTS engines where it can (root + apt-get). Elsewhere, a test that needs them
# is skipped with the builder's own install line instead of failing; every other test still runs.
MISSING_ENGINES = [name for name in ("espeak-ng", "flite") if shutil.which(name) is None]


def _skip_if_engines_missing(outcome):
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if MISSING_ENGINES and isinstance(exc, PapershelfError) and "apt-get install" in str(exc):
        skip = pytest.skip.Exception(f"needs the TTS engines: {exc}", _use_item_location=True)
        outcome.force_exception(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _skip_if_engines_missing((yield))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _skip_if_engines_missing((yield))


TINY = dict(n_train=6, n_dev=2, n_test=3, seed=3)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("speech") / "corpus", CorpusConfig(**TINY))


@pytest.fixture
def tiny_sizes():
    return dict(TINY)
