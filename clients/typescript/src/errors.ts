/**
 * Every refusal of a Keepstone server, as the one error class: the server's `code`
 * (`not_found`, `precondition_failed`, `invalid_edit`, ...: docs/errors.md), its one-sentence
 * `message`, the HTTP `status`, and any further fields of the error body in `details`
 * (e.g. `occurrences` and `lines` of an ambiguous edit). On `rate_limited`, `retry_after`
 * is how many seconds to wait, from the answer's `Retry-After` (1 when it names none).
 */
export class KeepstoneError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: Readonly<Record<string, unknown>>;
  readonly retry_after: number | undefined;

  constructor(
    code: string,
    message: string,
    status: number,
    details: Record<string, unknown> = {},
    retry_after?: number,
  ) {
    super(message);
    this.name = "KeepstoneError";
    this.code = code;
    this.status = status;
    this.details = details;
    this.retry_after = retry_after;
  }
}

/** The code of an error answer whose body names none, by its HTTP status: the Python
 * client's (`keepstone.errors`, the status of each direct subclass of its root), and
 * `internal_error` (the root's) for every other status. */
const CODE_OF_STATUS: Readonly<Record<number, string>> = {
  400: "bad_request",
  401: "unauthenticated",
  402: "plan_required",
  403: "forbidden",
  404: "not_found",
  409: "conflict",
  412: "precondition_failed",
  413: "too_large",
  422: "unprocessable",
  429: "rate_limited",
  503: "store_unavailable",
};

/** What an answer that the server did not shape as a Keepstone answer asks the caller to
 * check: behind a 5xx, most often a proxy whose Keepstone server is down; else an address
 * that is not a Keepstone server's. */
function check(status: number, baseUrl: string): string {
  if (status >= 500) {
    return (
      `check that the Keepstone server behind ${baseUrl} is running, and the log of any ` +
      "proxy in front of it (which may have answered for it)"
    );
  }
  return (
    `check that ${baseUrl} is the Keepstone server's address ` +
    "(another server or a proxy may have answered)"
  );
}

/** The error of an answer of `status` (not 2xx) with body `text`: the server's own
 * `{"error": {"code", "message", ...}}`, else one named by the status alone (as the Python
 * client names it) whose message says what the body was. */
export function errorFromAnswer(
  status: number,
  headers: Headers,
  text: string,
  baseUrl: string,
): KeepstoneError {
  const body = parseJson(text);
  const error = isRecord(body) ? body.error : undefined;
  const retry = (code: string): number | undefined =>
    code === "rate_limited" ? retryAfter(headers.get("Retry-After")) : undefined;
  if (isRecord(error) && typeof error.code === "string" && error.code) {
    const { code, message, ...details } = error;
    const said = typeof message === "string" ? message : `the server answered HTTP ${status}`;
    return new KeepstoneError(code, said, status, details, retry(code));
  }
  const code = CODE_OF_STATUS[status] ?? "internal_error";
  const what =
    body === undefined
      ? notJson(headers, text)
      : "a JSON body that is no Keepstone error (no error.code in it)";
  const message = `the server answered HTTP ${status} with ${what}: ${check(status, baseUrl)}`;
  return new KeepstoneError(code, message, status, {}, retry(code));
}

/** The error of a 2xx answer whose body is not the JSON the call expects (none, not JSON,
 * cut short): `store_unavailable`, as the Python client names an answer it cannot read,
 * with the answer's status. */
export function notJsonAnswer(
  status: number,
  headers: Headers,
  text: string,
  baseUrl: string,
): KeepstoneError {
  const message =
    `the server answered HTTP ${status} with ${notJson(headers, text)} ` +
    `where JSON was expected: ${check(status, baseUrl)}`;
  return new KeepstoneError("store_unavailable", message, status);
}

/** The error of a 2xx answer of JSON that is not the shape the call expects (`what`, e.g.
 * "a document"; `why`, e.g. `"etag" is missing`). */
export function wrongShape(
  status: number,
  what: string,
  why: string,
  baseUrl: string,
): KeepstoneError {
  const message =
    `the server answered HTTP ${status} with JSON that is not ${what} (${why}): ` +
    `check that ${baseUrl} is the address of a Keepstone server ` +
    "(another server or a proxy may have answered)";
  return new KeepstoneError("store_unavailable", message, status);
}

/** The error of a 3xx: this client does not follow a redirect (a write could be sent again
 * as a read), nor does the Python one. */
export function redirected(
  status: number,
  location: string | null,
  baseUrl: string,
): KeepstoneError {
  const where = location ? `a redirect to ${location}` : "a redirect";
  const message =
    `the server at ${baseUrl} answered HTTP ${status}, ${where}: ` +
    "give the address it redirects to as baseUrl (redirects are not followed)";
  return new KeepstoneError("store_unavailable", message, status);
}

/** A server that could not be reached: `store_unavailable` as the Python client names it,
 * with status 0 (no answer came). */
export function unreachable(baseUrl: string, cause: unknown): KeepstoneError {
  return new KeepstoneError(
    "store_unavailable",
    `cannot reach the Keepstone server at ${baseUrl}: ${why(cause)}; ` +
      "check that it is running and that baseUrl is its address",
    0,
  );
}

/** An answer that did not come whole within `timeoutMs`: `store_unavailable`, status 0. */
export function timedOut(baseUrl: string, timeoutMs: number, status?: number): KeepstoneError {
  const what =
    status === undefined ? "did not answer" : `did not finish its answer (HTTP ${status})`;
  return new KeepstoneError(
    "store_unavailable",
    `the Keepstone server at ${baseUrl} ${what} within ${timeoutMs} ms: ` +
      "check that it is not overloaded, or give a longer timeoutMs",
    0,
  );
}

/** An answer whose connection broke before its body was whole: `store_unavailable`,
 * status 0 (no whole answer came). */
export function brokenAnswer(baseUrl: string, status: number, cause: unknown): KeepstoneError {
  return new KeepstoneError(
    "store_unavailable",
    `the connection to the Keepstone server at ${baseUrl} broke while its answer ` +
      `(HTTP ${status}) was being read: ${why(cause)}; try again`,
    0,
  );
}

/** What went wrong under a failed fetch: Node's "fetch failed" says nothing, its cause
 * (`connect ECONNREFUSED ...`, `other side closed`) does. */
function why(cause: unknown): string {
  if (!(cause instanceof Error)) return String(cause);
  const inner = cause.cause;
  return inner instanceof Error && inner.message ? inner.message : cause.message;
}

/** `body`'s description for a message: its media type and size, and its first words. */
function notJson(headers: Headers, text: string): string {
  if (!text) return "an empty body";
  const type = headers.get("Content-Type")?.split(";")[0]?.trim() || "no media type";
  const words = text.replace(/\s+/g, " ").trim();
  const start = words.length > 60 ? `${words.slice(0, 60)}...` : words;
  const bytes = new TextEncoder().encode(text).length;
  return `a body that is not JSON (${type}, ${bytes} bytes: ${JSON.stringify(start)})`;
}

/** Seconds to wait from a `Retry-After` of seconds; 1 when there is none or it is not a
 * number of seconds (an HTTP date), as the Python client reads it. */
function retryAfter(header: string | null): number {
  const seconds = header === null || header.trim() === "" ? Number.NaN : Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : 1;
}

/** The JSON value `text` holds, or undefined when it holds none. */
export function parseJson(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
