"""Redaction follows every value to its end: a table of secret forms, each asserting no piece of it survives.

Each secret is made of characters and 4-grams that appear nowhere else in its form, so "no 4-character window of
the secret is left" means no byte of it survives (a tail after a quote, `#`, `,` or space included).
"""

from __future__ import annotations

import pytest

from p2p_ops.diagnose.redact import MASK, redact_text

# (form with {S} where the secret goes, the secret)
FORMS = [
    # env / shell assignments, names from the broad rule set
    ("DB_PASS={S}", "Zq9pw0rdVx"),
    ("export MYSQL_PWD={S}", "Zq9mysqlVx7"),
    ("REGISTRY_AUTH={S}", "Zq9YWRtaW46c2VjcmV0"),
    ("SECRET_KEY_BASE={S}", "Zq9f00dbeefcafe1234"),
    ("GOOGLE_CREDENTIALS_JSON='{S}'", '{"type":"service_account","pk":"Zq9abc, d#e"}'),
    ('export DB_PASSWORD="{S}"', "Zq9 has spaces, #hash and 'quote'"),
    ("export DB_PASSWORD='{S}'", 'Zq9 with "double" and #'),
    ("API_TOKEN={S} other=1", 'Zq9a"b c"d'),
    ("PASSWORD={S}", r"Zq9esc\ aped\ space"),
    ("DB_PASSWORD={S}", "Zq9trail#notacomment"),
    ("DB_PASSWORD={S}", "Zq9comma,semi"),
    ("DB_PASSWORD=$'{S}'", r"Zq9ansi\'quoted"),
    ("MY_SECRET={S} ./run.sh", "Zq9secretValue"),
    ("JWT_SIGNING_KEY={S}", "Zq9signingKeyValue"),
    ("STRIPE_SECRET={S}", "Zq9stripeS"),
    # YAML / INI / TOML
    ("password: {S}", "Zq9 yaml plain # scalar, with words"),
    ("  api_key: '{S}'", "Zq9yaml'' single"),
    ('db:\n  password: "{S}"\n  user: bob', 'Zq9yaml \\"dq\\" value'),
    ("aws_secret_access_key = {S}", "Zq9ini value with spaces"),
    ('client_secret = "{S}"', "Zq9toml#value"),
    # JSON and Python reprs
    ('{{"password": "{S}", "user": "bob"}}', 'Zq9json \\" , } # tail'),
    ('{{"auth": {{"token": "{S}"}}}}', "Zq9nested"),
    ("{{'api_key': '{S}', 'x': 1}}", "Zq9py repr, with comma"),
    ('{{"private_key_id": "{S}"}}', "Zq9keyid0123"),
    # URLs
    ("REDIS_URL=redis://:{S}@127.0.0.1:6379/0", "Zq9redispw"),
    ("postgres://app:{S}@db.local/app", "Zq9pg#pass"),
    ("https://user:{S}@example.test/x", "Zq9p@ss"),
    ("https://{S}@github.com/org/repo.git", "ghp_Zq9abcdefghijklmnopqrstuvwxyz0123"),
    ("GET /v1/models?key={S}&alt=json", "Zq9querykey"),
    ("https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig={S}&se=2026", "Zq9azure%2Bsig%3D"),
    ("https://s3.test/o?X-Amz-Credential=AK%2F1&X-Amz-Signature={S}", "Zq9amzsig"),
    ("wss://api.test/stream?access_token={S}", "Zq9wsstoken"),
    ("https://hooks.slack.com/services/{S}", "T00Zq9/B00Zq8/XXZq7webhook"),
    ("https://discord.com/api/webhooks/{S} posted", "123Zq9/abcZq8tok"),
    # headers and cookies
    ("Authorization: Bearer {S}", "Zq9bearer.tok+/="),
    ("Authorization: Basic {S}", "Zq9YmFzaWM6cGFzcw=="),
    ("Authorization: Digest {S}", 'username="bob", response="Zq9digest"'),
    ('curl -H "Authorization: Token {S}" http://127.0.0.1:8200/', "Zq9tokenHdr"),
    ("{{'Authorization': 'Bearer {S}', 'Accept': '*/*'}}", "Zq9reprBearer"),
    ("Cookie: {S}", "session=Zq9cookie; theme=dark"),
    ("Set-Cookie: {S}", "sid=Zq9setcookie; Path=/; HttpOnly"),
    ('curl -H "X-Api-Key: {S}" http://127.0.0.1/', "Zq9xapikey"),
    # command-line flags
    ("mysql -u root -p{S} app", "Zq9mysqlflag"),
    ("mysqldump -h db -p'{S}' app", "Zq9 quoted flag"),
    ("sshpass -p {S} ssh host", "Zq9sshpass"),
    ("vllm serve m --api-key {S} --port 8000", "Zq9vllmkey"),
    ("lmcache server --hf-token={S}", "Zq9hftokenflag"),
    ('tool --password "{S}" --verbose', "Zq9 spaced flag"),
    # bare token shapes
    ("using {S} for NIM", "nvapi-Zq9abcdefghijklmnopqrstuvwxyz0123"),
    ("key {S} loaded", "sk-proj-Zq9abcdefghijklmnopqrstuvwx"),
    ("hub {S}", "hf_Zq9abcdefghijklmnopqrstuvwx"),
    ("gitlab {S}", "glpat-Zq9abcdefghijklmnopq"),
    ("slack {S}", "xoxb-Zq9-1234567890-abcdefghij"),
    ("aws {S}", "AKIAZQ9ABCDEFGHIJKLM"),
    ("jwt={S}", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJacTkifQ.Zq9signature01234"),
    ("oauth {S} x", "ya29.Zq9abcdefghijklmnopqrstuvwxyz"),
    ("stripe {S}", "sk_live_Zq9abcdefghijklmnop"),
    ("-----BEGIN PRIVATE KEY-----\n{S}\n-----END PRIVATE KEY-----", "MIIEvZq9abcdefghijkl\nZq8secondlineofkey0"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\n{S}", "b3BlbnNzaZq9truncatedkeymaterial"),
    ('"private_key": "-----BEGIN RSA PRIVATE KEY-----\\n{S}\\n-----END RSA PRIVATE KEY-----\\n"',
     "MIIEpZq9jsonescapedkeymaterial"),
    # .netrc (one line, and spread over lines)
    ("machine api.test login bob password {S}", "Zq9netrcPw"),
    ("machine api.test\n  login bob\n  password {S}", "Zq9netrcMulti"),
    ("default login anonymous password {S}", "Zq9netrcDefault"),
    # YAML block and folded scalars under a secret key
    ("client_secret: >-\n  {S}\nuser: bob", "Zq9folded\n  Zq8second"),
    ("password: |\n    {S}\nnext: 1", "Zq9literal block\n    Zq8more lines"),
    ("auth:\n  token: |+\n    {S}\n  user: bob", "Zq9keep chomping"),
    # -a / --pass style flags of common CLIs
    ("redis-cli -h 127.0.0.1 -a {S} ping", "Zq9redisAuth"),
    ("redis-cli --pass {S} info", "Zq9redisPass"),
    ("curl -u bob:{S} https://api.test/", "Zq9curlUser"),
    ("curl --user 'bob:{S}' https://api.test/", "Zq9curl quoted"),
    ("ldapsearch -x -D cn=admin -w {S} -b dc=x", "Zq9ldapPw"),
    ("openssl pkcs12 -in a.p12 -passin pass:{S}", "Zq9opensslPass"),
    ("keytool -list -storepass {S} -keystore k.jks", "Zq9storepass"),
    ("sqlcmd -S db -U sa -P {S}", "Zq9sqlcmd"),
    ("mongosh mongodb://db -u admin -p {S}", "Zq9mongoPw"),
    # NUL-separated environ (values are literal to the NUL: spaces and quotes included) and /proc/*/environ
    ("HOME=/root\0DB_PASSWORD={S}\0PATH=/usr/bin", "Zq9 nul separated 'value'"),
    ("/proc/1234/environ: LANG=C\0API_TOKEN={S}\0TERM=xterm", "Zq9proc environ"),
    ("DB_PASSWORD={S}", "Zq9 env output with spaces"),
    # secret names glued to a prefix without an underscore
    ("PGPASSWORD={S} psql -h db", "Zq9pgpassword"),
    ("export MYSQLPASSWORD={S}", "Zq9gluedMysql"),
    ("PGPASSWORD='{S}' pg_dump app", "Zq9glued quoted"),
    # issue 44: argv as lists and strings, separators a line-based reader misses
    ("--api-key\0{S}\0--port\08000", "Zq9nulArgv"),
    ("--hf-token\n{S}\n--port", "Zq9newlineArgv"),
    ("args:\n- --api-key\n- {S}", "Zq9yamlArgv"),
    ('args: ["--hf-token", "{S}"]', "Zq9jsonArgv"),
    ("['--api-key', '{S}']", "Zq9pyArgv"),
    ("--otlp-headers x-honeycomb-team={S}", "Zq9otlpHeader"),
    ('"--otlp-headers", "x-honeycomb-team={S}"', "Zq9otlpList"),
    ("OTEL_EXPORTER_OTLP_HEADERS=x-honeycomb-team={S}", "Zq9otlpEnv"),
    ("aws configure set aws_secret_access_key {S}", "Zq9awsConfigure"),
    ("git config --global user.password {S}", "Zq9gitConfig"),
    ("api_key\t{S}", "Zq9tabSeparated"),
    ("api_key：{S}", "Zq9fullWidthColon"),
    ("https://u:{S}@host.test/x", "Zq9p@ss@w0rd"),
]


def windows(secret: str, n: int = 4) -> set[str]:
    return {secret[i:i + n] for i in range(max(1, len(secret) - n + 1))}


def leaked(form: str, secret: str, redacted: str, n: int = 4) -> list[str]:
    # 4-grams of the form itself may remain (forms sit on lines of their own: a newline may follow any of them)
    parts = [f.replace("{S}", "\0") for f in form.split("\n#\n")]
    around = "\0".join(parts) + "\n".join(parts) + "\0before line\nafter line\n"
    return sorted(w for w in windows(secret, n) if w in redacted and w not in around)


@pytest.mark.parametrize("form,secret", FORMS, ids=[f"{i:02d}" for i in range(len(FORMS))])
def test_no_byte_of_the_secret_survives(form, secret):
    text = form.replace("{{", "{").replace("}}", "}").replace("{S}", secret) if "{{" in form else \
        form.replace("{S}", secret)
    result = redact_text(f"before line\n{text}\nafter line\n", where="t")
    assert not leaked(form, secret, result.text), result.text
    assert MASK in result.text and result.redactions
    assert "before line\n" in result.text and result.text.endswith("\nafter line\n")


def test_the_table_is_broad_enough():
    assert len(FORMS) >= 80 and len(DIAGNOSTIC) >= 30


# What a bundle exists to show: the toolkit's own diagnostic names and values, which must survive unchanged.
DIAGNOSTIC = [
    "stored chunk cache_key=5f3a9c0d1e2b size=262144",
    "chunk_key=0xdeadbeef hit", "object_key: vllm@tiny-llm@256@0@5f3a9c", "prefix_key=p-17",
    "routing_key=node-b-0", "--block-hash-key sha256", "--block-hash-key=sha256",
    "gid_key=fe80::1", "gid_key: 0000:0000:0000:0000:0000:ffff:c612:000b", "ssh_auth=publickey",
    "ssh_auth: password", "auth=none", "secret_sharing_mode=off", "secret_sharing_mode: enabled",
    "api_key: set (not shown)", "P2P_ENGINE_API_KEY: set (not shown)", "hash_key=blake3",
    "lookup_key=abc123", "partition_key=7", "sort_key=ts", "primary_key=id", "index_key=3",
    "kv_key_count=12", "token_count=55", "eos_token: </s>", "PWD=/home/me", "passes=3",
    "bypass=1", "compass heading", "the password policy allows 12 chars", "password policy: strict",
    "machine learning login page", "mysql -u root app", "redis-cli -h 127.0.0.1 ping",
    "curl -u bob https://api.test/", "secret_name=lmcache-creds", "GID[3]: fe80::1 RoCE v2",
    "key_hash=5f3a", "cached_tokens=512 prompt_tokens=600",
    # issue 44: names that identify data, prose, auth modes and public keys
    "tokenizer_key=llama-3", "model_key: qwen3-0.6b", "instance_key=node-a-0", "storage_key=vllm@tiny@256@5f3a",
    "request_key=r-17", "uses Bearer authentication for /v1", "Authorization: disabled",
    "ssh_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host",
    "public_key: ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 op@box", "max_headers=64",
    # issue 42: LMCache logs its worker pool's affinity_key; the bundle masked 5 of 5
    "submit(affinity_key=1734, fn=store)",
]


@pytest.mark.parametrize("text", DIAGNOSTIC, ids=[f"{i:02d}" for i in range(len(DIAGNOSTIC))])
def test_every_diagnostic_value_survives_unchanged(text):
    result = redact_text(f"before line\n{text}\nafter line\n", where="t")
    assert result.text == f"before line\n{text}\nafter line\n" and not result.redactions


@pytest.mark.parametrize("text", [
    "PWD=/home/me", "eos_token: </s>", "prefill_us_per_token: 0.5", "max_tokens=5 cached_tokens=512",
    "see docs for the password policy", "chunk hash key 1234", "http://127.0.0.1:8200/status?verbose=1",
    "ssh -p2222 host", "UCX_TLS=rc,sm,self", "--max-tokens 4096",
])
def test_harmless_text_is_left_alone(text):
    assert redact_text(text).text == text


def test_bundle_of_a_fleet_whose_log_holds_every_form(tmp_path, p2pctl):
    import json
    import tarfile

    from p2p_ops.lifecycle import launch
    from p2p_ops.lifecycle.context import FleetContext
    from tests.conftest import write_local_fleet

    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="forms"))
    launch.render(ctx)
    log = ctx.layout.log("node-a-0", "server")
    texts = [(f.replace("{{", "{").replace("}}", "}") if "{{" in f else f).replace("{S}", s) for f, s in FORMS]
    log.write_text("\n".join(texts) + "\n")
    out = tmp_path / "bundle.tar.gz"
    code, stdout, err = p2pctl("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--json")
    assert code == 0, err
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    root = tmp_path / "x"
    [log_copy] = list(root.rglob("node-a-0/server.log"))
    redacted_log = log_copy.read_text()
    everything = "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()) + stdout
    for form, secret in FORMS:
        # every form's own text may remain (`mysql -u root` in one form holds "mysql" of another's secret)
        assert not leaked("\n#\n".join(f for f, _ in FORMS), secret, redacted_log), form
        assert secret not in everything and all(line not in everything for line in secret.splitlines()), form
    json.loads(next((tmp_path / "x").rglob("manifest.json")).read_text())
