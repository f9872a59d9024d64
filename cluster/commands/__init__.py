"""Commands on schedules and executions, shared by the API and the tests: validation (errors
name the field in the API's terms), then storage. `explain` answers "why did (or didn't) it
fire?" from the rows (pure), `values` holds the validated value rules.
"""
