"""The test doubles the tests and the benchmarks share: what a test puts where a model,
a web service or a tool server would be. They live with the tests, not in the installed
package (tests/test_wheel.py checks the wheel).

- ``fake_llm_server``: a loopback HTTP server speaking the OpenAI and Anthropic wire
  protocols, replying from a script or a function of the request;
- ``fake_search_server``, ``fake_web_server``: loopback stand-ins for the search APIs
  and for web sites;
- ``fault_tool_server``, ``flaky_tool_server``, ``chatty_tool_server``: MCP servers that
  fail in chosen ways, misbehave on purpose, or write stray output to stdout;
- ``faults``: the fault-injection suite's pieces;
- ``bench_model``: the scripted model the small test suite is written for;
- ``endpoints``: for the router of several model endpoints, a clock the test moves and
  scripted clients that fail, or hold their calls until released;
- ``synthetic_run``: a made-up run directory of any size, for the report's size and
  speed (the report's own tests read runs recorded by the real code path).

The in-process model double, ``ScriptedLLM``, is public for users' own tests and lives in
``deepledger.llm.scripted``.
"""
