/**
 * Every refusal of a Keepstone server, as the one error class: the server's `code`
 * (`not_found`, `precondition_failed`, `invalid_edit`, ...: docs/errors.md), its one-sentence
 * `message`, the HTTP `status`, and any further fields of the error body in `details`
 * (e.g. `occurrences` and `lines` of an ambiguous edit).
 */
export class KeepstoneError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(
    code: string,
    message: string,
    status: number,
    details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = "KeepstoneError";
    this.code = code;
    this.status = status;
    this.details = details;
  }
}

/** The error an answer of `status` with `body` stands for: the `{"error": {"code",
 * "message", ...}}` shape of every refusal, else one named by the status alone. */
export function errorFromAnswer(status: number, body: unknown): KeepstoneError {
  const error = isRecord(body) ? body.error : undefined;
  if (isRecord(error) && typeof error.code === "string" && typeof error.message === "string") {
    const { code, message, ...details } = error;
    return new KeepstoneError(code, message, status, details);
  }
  const code = status >= 500 ? "internal_error" : "http_error";
  return new KeepstoneError(code, `the server answered HTTP ${status}`, status);
}

/** A server that could not be reached: `store_unavailable` as the Python client names it,
 * with status 0 (no answer came). */
export function unreachable(baseUrl: string, cause: unknown): KeepstoneError {
  const why = cause instanceof Error ? cause.message : String(cause);
  return new KeepstoneError(
    "store_unavailable",
    `cannot reach the Keepstone server at ${baseUrl}: ${why}`,
    0,
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
