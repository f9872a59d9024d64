"""cronwheel.console: the web console (`cronwheel console`).

A Starlette application rendering Jinja2 templates on the server, with htmx (vendored, static/)
for the few parts that refresh themselves (a schedule's timeline, the overview) and inline SVG
charts drawn by the server: no build step, no JavaScript to compile, nothing fetched from a CDN.

It talks to the cluster only through `cronwheel.client.AsyncClient`, one per logged-in person,
holding that person's token: tokens, tenancy and TLS apply exactly as for any other client (a
tenant's token sees its tenant, an admin's sees all).

Modules: web (settings, sessions of a request, CSRF, rendering, errors as pages), sessions (the
session store), forms (form <-> Client arguments, API field -> form field), schedules,
executions, overview (pages; overview also samples ClusterStatus for its charts), app (routes,
serve).
"""
