"""The one must-agree list, shared by validate and doctor (whose findings every verb's cause reads)."""

from __future__ import annotations

from p2p_ops.spec import agreement as A


def test_the_spec_settings_that_must_be_fleet_wide_come_from_the_list():
    assert set(A.FLEET_WIDE_ONLY) == {"python_hash_seed", "chunk_size", "hash_algorithm", "l1_align_bytes", "model",
                                      "transfer_engine"}
    assert "LMCACHE_CHUNK_SIZE" in A.SERVER_ENV and "UCX_TLS" in A.SERVER_ENV
    assert len({m.key for m in A.MUST_AGREE}) == len(A.MUST_AGREE)


def test_the_engine_model_from_an_environment():
    assert A.engine_model({}) is None
    assert A.engine_model({"P2P_ENGINE_MODEL_SEED": "1", "P2P_ENGINE_NUM_LAYERS": "2"}) == \
        "seed=1 layers=2 heads=None head_size=None"
    assert A.BY_KEY["UCX_TLS"].severity == "warn" and A.BY_KEY["NONE_HASH"].severity == "error"
