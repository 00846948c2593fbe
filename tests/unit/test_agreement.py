"""The one must-agree list and its check, shared by validate, consistency (test basic) and doctor."""

from __future__ import annotations

from p2p_ops.spec import agreement as A


def test_the_spec_settings_that_must_be_fleet_wide_come_from_the_list():
    assert set(A.FLEET_WIDE_ONLY) == {"python_hash_seed", "chunk_size", "hash_algorithm", "l1_align_bytes", "model",
                                      "transfer_engine"}
    assert "LMCACHE_CHUNK_SIZE" in A.SERVER_ENV and "UCX_TLS" in A.SERVER_ENV
    assert len({m.key for m in A.MUST_AGREE}) == len(A.MUST_AGREE)


def test_disagreements_ignore_unknown_values_and_name_the_fix():
    found = A.disagreements({
        "a-0": {"chunk_size": "256", "PYTHONHASHSEED": "0", "model": None, "nixl_version": "1.5.1"},
        "b-0": {"chunk_size": "512", "PYTHONHASHSEED": "0", "model": "m", "nixl_version": ""},
        "c-0": {"chunk_size": "256", "not_a_key": "x"},
    })
    assert [d.key for d in found] == ["chunk_size"]
    assert found[0].values == {"a-0": "256", "b-0": "512", "c-0": "256"}
    assert found[0].describe().startswith("chunk_size differs across peers (a-0=256, b-0=512, c-0=256); fix: set "
                                          "settings.chunk_size")


def test_values_from_an_environment_and_the_engine_model():
    vals = A.values_from_env({"LMCACHE_HASH_ALGORITHM": "blake3", "PYTHONHASHSEED": "7"})
    assert vals["hash_algorithm"] == "blake3" and vals["PYTHONHASHSEED"] == "7" and vals["chunk_size"] is None
    assert A.engine_model({}) is None
    assert A.engine_model({"P2P_ENGINE_MODEL_SEED": "1", "P2P_ENGINE_NUM_LAYERS": "2"}) == \
        "seed=1 layers=2 heads=None head_size=None"
    assert A.BY_KEY["UCX_TLS"].severity == "warn" and A.BY_KEY["NONE_HASH"].severity == "error"
