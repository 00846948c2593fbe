"""One classifier of secret names (`facts.secret_names`): env.sh diffs, redaction and baselines agree on it."""

from __future__ import annotations

import pytest

from p2p_ops.diagnose.redact import redact_text
from p2p_ops.facts.envfile import file_diff
from p2p_ops.observe.baseline import settings_of

# (variable, whether its value is a secret): the first rows are where the three used to disagree.
NAMES = [("DB_PASSWD", True), ("MY_PASSPHRASE", True), ("OTEL_EXPORTER_OTLP_HEADERS", True),
         ("P2P_CACHE_KEY", False), ("LMCACHE_MAX_TOKENS", False), ("TOKENIZER_KEY", False),
         ("HF_TOKEN", True), ("AWS_ACCESS_KEY_ID", True), ("PWD", False), ("EOS_TOKEN", False),
         ("AZURE_STORAGE_KEY", True), ("STORAGE_KEY", False), ("AFFINITY_KEY", False)]


@pytest.mark.parametrize("name, secret", NAMES)
def test_env_diffs_redaction_and_baselines_agree_on_what_is_secret(tmp_path, name, secret):
    value = "Zq8value"
    diff = "\n".join(file_diff(f"export {name}=old1\n", f"export {name}={value}\n", "env.sh"))
    redacted = redact_text(f"export {name}={value}\n").text
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "a.env.sh").write_text(f"export {name}={value}\n")
    kept = settings_of(tmp_path)[f"a:{name}"]
    assert [value not in diff, value not in redacted, kept != value] == [secret] * 3, (diff, redacted, kept)
