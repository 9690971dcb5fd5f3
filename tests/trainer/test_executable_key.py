"""The key of a compiled step saved whole (tpujob_trainer.executable_cache): anything the step
depends on changes it, so a restart never loads a step compiled from something else."""

from __future__ import annotations

import flax
import jax
import jaxlib
import optax
import pytest

from tpujob_trainer import executable_cache
from tpujob_trainer.executable_cache import current_key

pytestmark = pytest.mark.unit

CONFIG = {"model": {"d_model": 128}, "train": {"steps": 10}}


def test_the_same_inputs_give_the_same_key():
    assert current_key(CONFIG) == current_key(dict(CONFIG))


@pytest.mark.parametrize("module", [jax, jaxlib, flax, optax], ids=lambda m: m.__name__)
def test_another_version_of_a_library_the_step_is_built_from_changes_the_key(monkeypatch, module):
    before = current_key(CONFIG)
    monkeypatch.setattr(module, "__version__", module.__version__ + ".post1")
    assert current_key(CONFIG) != before


@pytest.mark.parametrize("change", [
    lambda mp: mp.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true"),
    lambda mp: mp.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_async_all_gather=true"),
    lambda mp: mp.setattr(executable_cache, "_source_digest", "another source"),
], ids=["xla-flags", "libtpu-args", "source"])
def test_the_environment_and_the_source_change_the_key(monkeypatch, change):
    before = current_key(CONFIG)
    change(monkeypatch)
    assert current_key(CONFIG) != before


def test_another_cpu_kind_changes_the_key_on_cpu(monkeypatch):
    assert jax.devices()[0].platform == "cpu"
    monkeypatch.setattr(executable_cache, "this_cpu_flags", lambda: frozenset({"avx2", "fma"}))
    avx2 = current_key(CONFIG)
    monkeypatch.setattr(executable_cache, "this_cpu_flags",
                        lambda: frozenset({"avx2", "fma", "avx512_bf16"}))
    assert current_key(CONFIG) != avx2


def test_the_initial_state_and_the_step_have_keys_of_their_own():
    # Both are saved under one job's cache: one must never be loaded for the other.
    assert current_key(CONFIG, "init") != current_key(CONFIG, "step") == current_key(CONFIG)


def test_another_config_changes_the_key():
    assert current_key({**CONFIG, "train": {"steps": 11}}) != current_key(CONFIG)


def test_the_order_of_the_configs_keys_does_not_matter():
    reordered = {"train": {"steps": 10}, "model": {"d_model": 128}}
    assert list(reordered) != list(CONFIG) and current_key(reordered) == current_key(CONFIG)


def test_the_source_digest_covers_the_trainers_and_the_planners_files(monkeypatch, tmp_path):
    monkeypatch.setattr(executable_cache, "_source_digest", None)
    digest = executable_cache.source_digest()
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert executable_cache.source_digest() == digest       # computed once, then kept
