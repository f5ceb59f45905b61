"""The secret-file rules: one case per built-in rule, the near misses that must stay
readable, the user's own rules, and how they travel to a tool server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deepledger.config import compose, secret_rules, server_environment
from deepledger.secret_files import BUILTIN_RULES, SECRET_FILES_ENV, SecretFiles

ROOT = Path(__file__).resolve().parents[1]
DATA = Path("/data/suite")


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        (".env", ".env*"),
        (".env.local", ".env*"),
        (".env.production", ".env*"),
        (".netrc", ".netrc"),
        (".git-credentials", ".git-credentials"),
        (".git/config", ".git/"),
        (".git/refs/heads/main", ".git/"),
        ("server.pem", "*.pem"),
        ("tls/private.key", "*.key"),
        ("id_rsa", "id_rsa*"),
        ("id_rsa.pub", "id_rsa*"),
        ("id_ed25519", "id_ed25519*"),
        ("id_ecdsa", "id_ecdsa*"),
        ("id_dsa", "id_dsa*"),
        (".ssh/known_hosts", ".ssh/"),
        (".aws/config", ".aws/"),
        (".npmrc", ".npmrc"),
        (".pypirc", ".pypirc"),
        ("credentials.json", "credentials*.json"),
        ("credentials-prod.json", "credentials*.json"),
        ("Credentials.JSON", "credentials*.json"),  # any case
        ("CERT.PEM", "*.pem"),
    ],
)
def test_each_builtin_rule_refuses_its_files(path: str, rule: str) -> None:
    assert SecretFiles().rule_for(DATA / path) == rule


def test_every_builtin_rule_has_a_case_above() -> None:
    covered = {"'" + rule + "'" for rule in BUILTIN_RULES}
    source = Path(__file__).read_text(encoding="utf-8")
    assert [rule for rule in covered if f", {rule})" not in source.replace('"', "'")] == []


@pytest.mark.parametrize(
    "path",
    [
        "keyboard.xlsx",
        "environment.csv",
        "keys.txt",
        "monkey.pem.txt",
        "key.pdf",
        "my.env.txt",  # "env" inside a name, no leading dot
        "git/config",  # a folder called git, not .git
        "ssh-notes.md",
        "credentials.txt",
        "credentials.json.md",
        "rsa_notes.txt",
        "netrc.txt",
    ],
)
def test_near_misses_stay_readable(path: str) -> None:
    assert SecretFiles().rule_for(DATA / path) is None


def test_a_file_inside_a_secret_folder_is_refused_at_any_depth() -> None:
    assert SecretFiles().rule_for("/home/bob/.ssh/keys/backup/notes.txt") == ".ssh/"
    assert SecretFiles().rule_for("/srv/project/.git/hooks/post-commit") == ".git/"


def test_a_symlinks_target_decides(tmp_path: Path) -> None:
    """The rule meets the resolved path: a harmless name pointing at .env is .env."""
    (tmp_path / ".env").write_text("KEY=x\n")
    (tmp_path / "notes.txt").symlink_to(tmp_path / ".env")
    assert SecretFiles().rule_for((tmp_path / "notes.txt").resolve()) == ".env*"


def test_the_users_rules_add_to_the_builtin_ones() -> None:
    rules = SecretFiles(("*.kdbx", "vault/"))
    assert rules.rule_for(DATA / "passwords.kdbx") == "*.kdbx"
    assert rules.rule_for(DATA / "vault" / "notes.txt") == "vault/"
    assert rules.rule_for(DATA / ".env") == ".env*"
    assert rules.rule_for(DATA / "keyboard.xlsx") is None


def test_the_refusal_names_the_rule_not_the_content() -> None:
    message = SecretFiles().refusal("link.txt", ".env*")
    assert "link.txt" in message and "'.env*'" in message


def test_web_secret_files_reach_the_tool_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = compose(ROOT / "conf", ["web.secret_files=[*.kdbx, ' vault/ ']"])
    assert secret_rules(cfg).extra == ("*.kdbx", "vault/")
    value = server_environment(cfg)[SECRET_FILES_ENV]
    assert value == os.pathsep.join(["*.kdbx", "vault/"])
    monkeypatch.setenv(SECRET_FILES_ENV, value)
    assert SecretFiles.from_environment().rule_for(DATA / "a.kdbx") == "*.kdbx"


def test_no_user_rules_no_variable() -> None:
    assert SECRET_FILES_ENV not in server_environment(compose(ROOT / "conf", []))


def test_the_commands_own_process_shares_the_users_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """What deepledger reads itself (the scraper's corpus:// links) meets web.secret_files too."""
    from deepledger.config import share_reading_rules

    monkeypatch.setenv(SECRET_FILES_ENV, "")  # restored after the test
    share_reading_rules(compose(ROOT / "conf", ["web.secret_files=[vault/]"]))
    assert SecretFiles.from_environment().rule_for(DATA / "vault" / "notes.md") == "vault/"


def test_a_windows_archive_member_is_split_at_its_backslashes() -> None:
    # Zip archives made on Windows may name members with backslashes; on Linux the whole
    # name would otherwise be one harmless-looking file name.
    assert SecretFiles().rule_for("project\\.env") == ".env*"
    assert SecretFiles().rule_for("project\\.git\\config") == ".git/"
    assert SecretFiles().rule_for("project\\notes.txt") is None


@pytest.mark.parametrize("rule", ["config/secrets.yaml", "a\\b.txt", "/etc/app.conf"])
def test_a_users_rule_holding_a_path_is_a_configuration_error(rule: str) -> None:
    # A rule is matched against one name at a time: a path would silently match nothing.
    from deepledger.config import validate
    from deepledger.errors import ConfigError

    cfg = compose(ROOT / "conf", [f"web.secret_files=[{rule!r}]"])
    with pytest.raises(ConfigError, match=r"web\.secret_files: .* holds a path"):
        validate(cfg)


def test_a_folder_rule_with_its_slash_is_accepted() -> None:
    assert secret_rules(compose(ROOT / "conf", ["web.secret_files=[vault/]"])).extra == ("vault/",)
