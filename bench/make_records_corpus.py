"""Generate the fixed search-quality corpus of team memory records (deterministic).

Writes ``tests/data/records_corpus.jsonl`` (``{"id", "text"}`` per line) and
``tests/data/records_queries.jsonl`` (``{"query", "relevant": [ids]}``).

The corpus is ~2,100 short summaries of finished engineering work: ~2,000 built from
templates (varied verbs, components, symptoms, causes and outcomes, so every query
word also appears in many unrelated records) and a set of hand-written "needle"
records, each with a query phrased the way a colleague would ask for it later —
partly in other words than the record uses. Run it again to regenerate the same
files byte for byte::

    python bench/make_records_corpus.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20260
FILLER = 2000
DATA = Path(__file__).resolve().parent.parent / "tests" / "data"

ACTIONS = [
    "Fixed",
    "Refactored",
    "Investigated",
    "Added retries to",
    "Removed dead code from",
    "Migrated",
    "Upgraded",
    "Documented",
    "Reverted a change in",
    "Optimized",
    "Debugged",
    "Rewrote",
    "Hardened",
    "Instrumented",
    "Paired on",
    "Cleaned up",
    "Profiled",
    "Split",
    "Load-tested",
    "Added metrics to",
    "Patched",
    "Reviewed",
]
COMPONENTS = [
    "the billing service",
    "the invoice generator",
    "the auth middleware",
    "the search indexer",
    "the deploy pipeline",
    "the CI runners",
    "the Postgres replica",
    "the Redis cache",
    "the webhook dispatcher",
    "mobile push notifications",
    "the CSV export",
    "the admin dashboard",
    "the API rate limiter",
    "the feature flag service",
    "the image thumbnailer",
    "the email templates",
    "the GraphQL gateway",
    "the Kafka consumer",
    "the S3 uploader",
    "the OAuth login flow",
    "the Terraform modules",
    "the Helm charts",
    "the cron scheduler",
    "payment reconciliation",
    "the audit log",
    "the session store",
    "the onboarding wizard",
    "the notification digest",
    "the data warehouse sync",
    "the PDF renderer",
    "the websocket server",
    "the checkout page",
    "the mobile release build",
    "the metrics exporter",
    "the backup job",
    "the user import tool",
    "the SSO integration",
    "the tax calculation module",
    "the translation pipeline",
    "the report scheduler",
]
PROBLEMS = [
    "a memory leak",
    "flaky tests",
    "slow queries",
    "timeouts under load",
    "a null pointer crash",
    "duplicate events",
    "stale cache entries",
    "a deadlock",
    "incorrect timezone handling",
    "missing retries",
    "high p99 latency",
    "a broken migration",
    "wrong currency rounding",
    "noisy alerts",
    "a race condition",
    "connection pool exhaustion",
    "an infinite retry loop",
    "a regression after the upgrade",
    "excessive log volume",
    "a failing health check",
    "out-of-order messages",
    "a permissions bug",
    "encoding errors with non-ASCII names",
    "a disk filling up",
    "an expired certificate",
    "a CORS misconfiguration",
    "a cold start delay",
]
CAUSES = [
    "an unbounded worker pool",
    "a missing index on created_at",
    "a shared mutable default",
    "clock skew between hosts",
    "an N+1 query in the serializer",
    "a too-short TTL",
    "a retry without backoff",
    "a stale DNS entry",
    "a lock held across an HTTP call",
    "a leaked file handle",
    "a misconfigured health probe",
    "an off-by-one in pagination",
    "a dependency bump",
    "a race between two consumers",
    "a float used for money",
    "a missing await",
    "an oversized batch",
    "a default timeout of zero",
    "an unescaped header",
    "lazy loading inside a loop",
]
OUTCOMES = [
    "p95 dropped from {a}ms to {b}ms",
    "added a regression test",
    "shipped behind the flag {flag}",
    "merged in PR #{n}",
    "rolled out to {pct}% of tenants",
    "documented the runbook step",
    "alert thresholds adjusted",
    "no customer impact",
    "follow-up ticket filed as OPS-{n}",
    "error rate back under 0.1%",
    "verified on staging first",
    "hotfixed in release {major}.{minor}",
    "dashboards updated",
    "on-call notes updated",
    "backfilled the affected rows",
]
FLAGS = ["new-checkout", "fast-path", "v2-export", "async-mail", "beta-search", "dark-launch"]
PEOPLE = ["Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Jun"]

# (record text, query, follow-up records that are also relevant)
NEEDLES: list[tuple[str, str, list[str]]] = [
    (
        "Customers got blank invoice PDFs: concurrent Celery workers wrote to one shared /tmp "
        "file and clobbered each other. Each render job now gets its own temporary directory.",
        "empty invoice pdf when workers run at the same time",
        [],
    ),
    (
        "Stripe webhooks were processed twice after the load balancer retried on a 504; added an "
        "idempotency key table keyed by event id so duplicates are dropped.",
        "stripe webhook handled twice duplicate charge",
        [],
    ),
    (
        "Login with Okta SAML failed for users whose email had uppercase letters; we now "
        "lower-case the NameID before matching accounts.",
        "okta sso login fails capital letters in email",
        [],
    ),
    (
        "Nightly pg_dump backup silently produced zero-byte files because the disk was full; "
        "moved backups to a dedicated volume and alert on file size.",
        "database backup files are empty",
        [
            "Added an alert when the nightly backup file is "
            "smaller than 1 MB, after the zero-byte pg_dump incident."
        ],
    ),
    (
        "The Android build broke after Gradle 8 because the Kotlin plugin was pinned to an old "
        "version; bumped kotlin-gradle-plugin and cleared the build cache on CI.",
        "android gradle upgrade broke the build",
        [],
    ),
    (
        "Search autocomplete was slow for long prefixes; replaced the LIKE scan with a trigram "
        "GIN index, suggestions now return in 20ms.",
        "typeahead suggestions slow",
        [],
    ),
    (
        "Kubernetes pods of the API were OOMKilled every few hours; the JSON parser kept whole "
        "request bodies in a module-level list for debugging. Removed it.",
        "api pods keep getting out of memory killed",
        [],
    ),
    (
        "Daylight saving change moved scheduled reports one hour early for European customers; "
        "cron now stores schedules in the customer's IANA timezone instead of UTC offsets.",
        "reports sent an hour early after clocks changed",
        [],
    ),
    (
        "Rounding errors in multi-currency totals came from using floats; all money is now "
        "Decimal with banker's rounding and amounts stored in minor units.",
        "totals off by a cent in euro and yen",
        [],
    ),
    (
        "Password reset emails landed in spam at Gmail; added DKIM signing and a DMARC policy "
        "for the mail subdomain.",
        "reset password mail goes to junk folder",
        [],
    ),
    (
        "The Terraform plan wanted to recreate the production RDS instance because of a changed "
        "parameter group name; added lifecycle ignore_changes and renamed it back.",
        "terraform wants to destroy the production database",
        [],
    ),
    (
        "Users were logged out randomly because two app servers had different session signing "
        "secrets after a partial deploy; the secret now comes from the vault for every node.",
        "people randomly signed out",
        [],
    ),
    (
        "CSV export of large accounts timed out at 30 seconds; the export now streams rows from "
        "a server-side cursor and the download starts immediately.",
        "spreadsheet download times out for big customers",
        [],
    ),
    (
        "Image uploads from iPhones appeared rotated; the thumbnailer now applies the EXIF "
        "orientation before resizing.",
        "photos show up sideways",
        [],
    ),
    (
        "Kafka consumer lag grew to millions of messages because one partition's consumer was "
        "stuck on a poison message; added a dead-letter topic after three failures.",
        "consumer falling behind poison message",
        [],
    ),
    (
        "Feature flag evaluations hit the database on every request; added a 30 second "
        "in-memory cache with push invalidation, DB load dropped by 40%.",
        "flag checks hammering the database",
        [],
    ),
    (
        "A GraphQL query requesting nested comments could fetch 100k rows; added query depth "
        "and complexity limits to the gateway.",
        "deeply nested graphql request overloads server",
        [],
    ),
    (
        "The Redis cache returned other tenants' dashboards because the cache key omitted the "
        "org id; keys are now prefixed with the tenant and old keys were flushed.",
        "customer saw another company's dashboard data cache",
        [],
    ),
    (
        "Deploys were blocked for an hour because the CI runner image pulled from Docker Hub "
        "hit the rate limit; mirrored base images to our registry.",
        "docker hub pull limit blocking pipeline",
        [],
    ),
    (
        "The websocket server dropped connections every 60 seconds behind the new load "
        "balancer; set the idle timeout to 10 minutes and send pings every 25 seconds.",
        "realtime connection disconnects every minute",
        [],
    ),
    (
        "Translations for German were missing on the checkout page because the extraction "
        "script skipped template literals; fixed the extractor and re-synced with Crowdin.",
        "checkout text not translated into german",
        [],
    ),
    (
        "Audit log entries lacked the acting user for API-key requests; the middleware now "
        "records the key's owner and key id.",
        "audit trail doesn't show who did it with api keys",
        [],
    ),
    (
        "Sentry was flooded with ConnectionResetError from the health check endpoint; the probe "
        "now closes connections properly and the errors are gone.",
        "error tracker spammed by health probe resets",
        [],
    ),
    (
        "Two-factor codes were rejected for users whose phones drifted; accept one time step of "
        "clock skew in TOTP verification.",
        "2fa code invalid because phone clock is off",
        [],
    ),
    (
        "The tax module charged VAT to reverse-charge B2B customers in the EU; it now checks the "
        "VIES VAT number validation before applying tax.",
        "business customers in europe wrongly charged vat",
        [],
    ),
    (
        "Duplicate user accounts were created when people double-clicked the signup button; "
        "added a unique index on normalized email and disabled the button while submitting.",
        "double click on register makes two accounts",
        [],
    ),
    (
        "The data warehouse sync missed rows updated within the same second as the watermark; "
        "switched to an updated_at plus id cursor.",
        "warehouse missing some updated rows",
        [],
    ),
    (
        "Push notifications to iOS stopped after the APNs certificate expired; moved to token "
        "based auth with a .p8 key that does not expire.",
        "apple notifications stopped working",
        [
            "Added a calendar reminder and a monitor for "
            "APNs auth after iOS push notifications stopped."
        ],
    ),
    (
        "The onboarding wizard lost progress on page refresh; steps are now saved to local "
        "storage and restored.",
        "setup wizard resets when you reload",
        [],
    ),
    (
        "Slow admin dashboard: the organisations table ran an N+1 query per row for member "
        "counts; replaced with one grouped query, page load went from 8s to 300ms.",
        "admin page takes seconds to load organisations",
        [],
    ),
    (
        "Helm upgrade failed with immutable field errors on the Deployment selector; we delete "
        "and recreate the deployment in a maintenance window with a documented procedure.",
        "helm upgrade error selector is immutable",
        [],
    ),
    (
        "Emails with non-ASCII display names showed garbled characters; headers are now "
        "encoded per RFC 2047.",
        "sender name with accents shows broken characters",
        [],
    ),
    (
        "The rate limiter counted requests per process, so limits were ten times higher with "
        "ten replicas; moved the counters to Redis with a Lua script.",
        "throttling not enforced across instances",
        [],
    ),
    (
        "A migration adding a NOT NULL column locked the orders table for 12 minutes; we now "
        "add the column nullable, backfill in batches, then add the constraint.",
        "schema change locked a big table",
        [],
    ),
    (
        "The S3 uploader retried forever on AccessDenied; non-retryable errors now fail fast "
        "and surface to the user.",
        "upload keeps retrying on permission denied",
        [],
    ),
    (
        "Let's Encrypt renewals failed because the HTTP-01 challenge path was redirected to "
        "HTTPS by the new nginx rule; exempted /.well-known/acme-challenge.",
        "tls certificate did not renew",
        [],
    ),
    (
        "Elasticsearch cluster went red after a node ran out of disk; set watermark thresholds "
        "and an ILM policy deleting indices older than 30 days.",
        "search cluster status red disk",
        [],
    ),
    (
        "Mobile app crashed on launch for Android 8 users due to an API 26 incompatible call "
        "in the new analytics SDK; guarded it with a version check.",
        "app crashes at startup on old android",
        [],
    ),
    (
        "The report scheduler sent the same weekly digest twice when two scheduler pods ran; "
        "added leader election with a Postgres advisory lock.",
        "weekly summary email delivered twice",
        [],
    ),
    (
        "Search results ignored accents, so 'cafe' did not find 'café'; the analyzer now folds "
        "diacritics at index and query time.",
        "searching without accents finds nothing",
        [],
    ),
    (
        "CORS preflight requests failed from the new marketing domain; added it to the allowed "
        "origins and cached preflight responses for 10 minutes.",
        "browser blocks requests from marketing site",
        [],
    ),
    (
        "Cold starts of the image lambda took 9 seconds because of a 200 MB dependency; moved "
        "to a slim build and provisioned concurrency.",
        "serverless function slow first request",
        [],
    ),
    (
        "Invoices showed the wrong company address after a customer moved; invoices now "
        "snapshot the billing address at issue time.",
        "old invoices changed address after update",
        [],
    ),
    (
        "Connection pool exhaustion in the billing service: a transaction stayed open across an "
        "HTTP call to the payment provider. Moved the call outside the transaction.",
        "billing service runs out of database connections",
        [],
    ),
    (
        "Pagination skipped items when new rows were inserted between page loads; switched the "
        "list API from offset to keyset pagination.",
        "list api missing items when paging",
        [],
    ),
    (
        "Log volume cost spiked because debug logging was left on in production for the "
        "payments worker; made log level configurable and set it to info.",
        "logging bill went up",
        [],
    ),
    (
        "SSO users could not be deprovisioned: the SCIM DELETE handler returned 200 without "
        "disabling the account. Now it deactivates and revokes sessions.",
        "removed users from identity provider can still log in",
        [],
    ),
    (
        "The mobile release build failed to sign because the keystore password rotated; the CI "
        "secret was updated and the rotation documented.",
        "release build signing error",
        [],
    ),
    (
        "Backfill of 40M events took days; rewrote it as COPY into a staging table plus one "
        "INSERT ... SELECT, finished in 35 minutes.",
        "backfill too slow millions of rows",
        [],
    ),
    (
        "Users in Brazil could not pay with Pix because the checkout sent amounts with a comma "
        "decimal separator; amounts are now formatted with a dot for the API.",
        "brazilian payments fail decimal comma",
        [],
    ),
    (
        "Metrics exporter exposed a label per user id and Prometheus memory exploded; dropped "
        "the label and aggregated per plan instead.",
        "prometheus high cardinality label",
        [],
    ),
    (
        "The user import tool choked on CSV files saved by Excel with a BOM; the parser now "
        "strips the byte order mark.",
        "importing users from excel file fails first column",
        [],
    ),
    (
        "Deadlock between the order and inventory services when both locked rows in opposite "
        "order; both now lock inventory first.",
        "orders and stock updates deadlock",
        [],
    ),
    (
        "API responses leaked internal stack traces on validation errors; errors now use one "
        "JSON shape with a code and message.",
        "server returns python traceback to clients",
        [],
    ),
    (
        "Health check marked pods unhealthy during long GC pauses; separated liveness from "
        "readiness and relaxed the liveness timeout.",
        "kubernetes restarts pods during garbage collection",
        [],
    ),
]


def _filler(rng: random.Random) -> str:
    action = rng.choice(ACTIONS)
    component = rng.choice(COMPONENTS)
    problem = rng.choice(PROBLEMS)
    cause = rng.choice(CAUSES)
    outcome = rng.choice(OUTCOMES).format(
        a=rng.randint(300, 2000),
        b=rng.randint(20, 290),
        flag=rng.choice(FLAGS),
        n=rng.randint(100, 9999),
        pct=rng.choice([5, 10, 25, 50, 100]),
        major=rng.randint(1, 9),
        minor=rng.randint(0, 30),
    )
    shape = rng.randrange(4)
    if shape == 0:
        text = f"{action} {component}: {problem}, traced to {cause}; {outcome}."
    elif shape == 1:
        text = (
            f"{action} {component} after {problem} was reported. "
            f"Root cause: {cause}. {outcome.capitalize()}."
        )
    elif shape == 2:
        who = rng.choice(PEOPLE)
        text = (
            f"With {who}: {action.lower()} {component} to deal with {problem} ({cause}); {outcome}."
        )
    else:
        text = (
            f"{problem.capitalize()} in {component}. {action} it; "
            f"{cause} was the culprit. {outcome.capitalize()}."
        )
    return text


def build() -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    rng = random.Random(SEED)
    texts: list[str] = [_filler(rng) for _ in range(FILLER)]
    queries: list[dict[str, object]] = []
    placed: list[tuple[str, list[str], str]] = []
    for text, query, follow_ups in NEEDLES:
        placed.append((text, follow_ups, query))
    corpus: list[dict[str, str]] = [{"id": "", "text": t} for t in texts]
    # Needles go to deterministic random positions so ids say nothing of relevance.
    for text, follow_ups, query in placed:
        relevant_texts = [text, *follow_ups]
        for t in relevant_texts:
            corpus.insert(rng.randrange(len(corpus) + 1), {"id": "", "text": t})
        queries.append({"query": query, "relevant_texts": relevant_texts})
    for i, item in enumerate(corpus):
        item["id"] = f"c{i:05d}"
    by_text = {item["text"]: item["id"] for item in corpus}
    out_queries: list[dict[str, object]] = []
    for q in queries:
        rel = q["relevant_texts"]
        assert isinstance(rel, list)
        out_queries.append({"query": q["query"], "relevant": [by_text[t] for t in rel]})
    return corpus, out_queries


def main() -> None:
    corpus, queries = build()
    DATA.mkdir(parents=True, exist_ok=True)
    with open(DATA / "records_corpus.jsonl", "w", encoding="utf-8") as fh:
        for item in corpus:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    with open(DATA / "records_queries.jsonl", "w", encoding="utf-8") as fh:
        for q in queries:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{len(corpus)} records, {len(queries)} queries -> {DATA}")


if __name__ == "__main__":
    main()
