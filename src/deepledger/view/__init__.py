"""``deepledger view``: a local web app over a logs folder — every run listed, any run
opened with the report's own pages, a running bench watched live, a question asked and
its research streamed."""
