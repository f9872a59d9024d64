"""Commands on schedules and executions, shared by the API and the tests: validation (errors
name the field in the API's terms), then storage through its typed ports (`store.schedules`,
`store.executions`, `store.events`, `store.explain`; no SQL here). `explain` answers "why did
(or didn't) it fire?" from the rows (pure), `values` holds the validated value rules, `unique`
the unique jobs' options and key (pure), `submit_batcher` SubmitJob's group commit. Every
command takes `now` from its caller and hands it to the queries that stamp a time.
"""
