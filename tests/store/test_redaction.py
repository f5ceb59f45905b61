"""What keeps secrets out of the run directory."""

from __future__ import annotations

from deepledger.store.redaction import redact, redact_assignments, redact_exported


def test_redact_blanks_secret_assignments_in_text():
    assert redact(["+a.SERPER_API_KEY='x y'", "llm.x-api-key=k", "llm.api_key_env=FOO"]) == [
        "+a.SERPER_API_KEY=***",
        "llm.x-api-key=***",
        "llm.api_key_env=FOO",
    ]
    assert redact("a=1,b.token=s3cr3t,c=2") == "a=1,b.token=***,c=2"
    assert redact({"api-key": "k", "x-api-key": "k", "api_key_env": "FOO"}) == {
        "api-key": "***",
        "x-api-key": "***",
        "api_key_env": "FOO",
    }


def test_a_secret_key_in_a_nested_config_is_blanked_and_empty_or_other_values_kept():
    config = {"llm": {"api_key": "sk-1", "password": "", "retry": {"token": None}}, "n": 3}
    assert redact(config) == {
        "llm": {"api_key": "***", "password": "", "retry": {"token": None}},
        "n": 3,
    }
    assert (
        redact_assignments("+tools.x.env.GITHUB_TOKEN@pkg='a b'")
        == "+tools.x.env.GITHUB_TOKEN@pkg=***"
    )


def test_an_export_loses_the_secret_not_the_message() -> None:
    message = {
        "role": "tool",
        "content": "The access token=sk-1 was refused. Paris is the answer.",
        "tool_calls": [{"function": {"arguments": '{"key": "token=sk-2", "n": 1}'}}],
        "api_key": "sk-3",
    }
    assert redact_exported(message) == {
        "role": "tool",
        "content": "The access token=*** was refused. Paris is the answer.",
        "tool_calls": [{"function": {"arguments": '{"key": "token=***", "n": 1}'}}],
        "api_key": "***",
    }


def test_a_secret_inside_a_list_value_keeps_the_list_closed() -> None:
    from deepledger.store.redaction import redact_assignments

    override = "tools.x.args=[--api-key=abc,--token=x]"
    assert redact_assignments(override) == "tools.x.args=[--api-key=***,--token=***]"
    assert redact_assignments("env={API_TOKEN: 'a', b: c}") == "env={API_TOKEN: 'a', b: c}"
    assert redact_assignments("url='https://h/?token=T'") == "url='https://h/?token=***'"
