"""The API's shared pieces both apps' endpoints use: the `/api/v1/` app, auth and errors (`core`),
and what one request and one key may make the server do (`fair_ingest`)."""
