// How a request reaches the server and how its answer is read, as the Python client does it
// (keepstone.http_client, keepstone.store.http): a whole answer or a KeepstoneError that says
// truly what happened — no answer (unreachable, timed out), half an answer (the connection
// broke), a redirect (not followed), an error answer, or a 2xx whose body is not JSON.
import type { Middleware } from "openapi-fetch";
import {
  KeepstoneError,
  brokenAnswer,
  errorFromAnswer,
  notJsonAnswer,
  parseJson,
  redirected,
  timedOut,
  unreachable,
} from "./errors.js";

/** Methods whose repetition has the effect of one delivery (RFC 9110 §9.2.2). */
const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]);

/** The causes of a failed fetch that mean the connection broke before any answer came:
 * closed by the server (undici's "other side closed"), reset, or broken while written. */
const BROKEN = new Set(["UND_ERR_SOCKET", "ECONNRESET", "EPIPE"]);

type Fetch = (input: Request) => Promise<Response>;

/**
 * `fetch`, giving up after `timeoutMs` (Infinity: never), sending an idempotent request once
 * more when its connection broke before any answer came, and reading the whole body, so
 * that what it answers can be read without I/O.
 *
 * The one more try is the Python client's: a server or proxy may close a pooled connection
 * that stayed idle past its keep-alive timeout just as a request is sent on it; the server
 * never read that request. A POST (edit, move, restore) is never sent twice: the client
 * cannot tell a request the server never read from one it read and then lost. A refused
 * connection or a timeout is no such race, and is not tried again.
 */
export function transport(fetch: Fetch, baseUrl: string, timeoutMs: number): Fetch {
  const signal = (): AbortSignal | undefined =>
    Number.isFinite(timeoutMs) ? AbortSignal.timeout(timeoutMs) : undefined;
  const send = async (request: Request, again: boolean): Promise<Response> => {
    const spare = again ? request.clone() : undefined;
    const timeout = signal();
    let response: Response;
    try {
      response = await fetch(timeout ? new Request(request, { signal: timeout }) : request);
    } catch (cause) {
      if (cause instanceof KeepstoneError) throw cause;
      if (timeout?.aborted) throw timedOut(baseUrl, timeoutMs);
      if (spare && BROKEN.has(errorCode(cause))) return send(spare, false);
      throw unreachable(baseUrl, cause);
    }
    if (response.type === "opaqueredirect" || (response.status >= 300 && response.status < 400)) {
      await response.body?.cancel().catch(() => undefined);
      throw redirected(response.status, response.headers.get("Location"), baseUrl);
    }
    let body: ArrayBuffer;
    try {
      body = await response.arrayBuffer();
    } catch (cause) {
      if (timeout?.aborted) throw timedOut(baseUrl, timeoutMs, response.status);
      throw brokenAnswer(baseUrl, response.status, cause);
    }
    // The statuses a Response may not be made with a body of.
    const empty = response.status === 204 || response.status === 205;
    return new Response(empty ? null : body, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
  return (request) => send(request, IDEMPOTENT.has(request.method));
}

/**
 * What an answer read whole by {@link transport} means: an error answer thrown as the
 * server's refusal (or one named by its status), and a 2xx that should carry JSON but does
 * not thrown as such, never left to be parsed into an error that reads as an outage.
 */
export function readAnswers(baseUrl: string): Middleware {
  return {
    async onResponse({ response, options }) {
      if (response.ok && options.parseAs !== "json") return undefined;
      const text = await response.clone().text();
      if (!response.ok) throw errorFromAnswer(response.status, response.headers, text, baseUrl);
      if (parseJson(text) === undefined) {
        throw notJsonAnswer(response.status, response.headers, text, baseUrl);
      }
      return undefined;
    },
  };
}

/** The code of a failed fetch's cause (`ECONNRESET`, `UND_ERR_SOCKET`, ...), or ''. */
function errorCode(error: unknown): string {
  const cause = error instanceof Error ? error.cause : undefined;
  const code =
    typeof cause === "object" && cause !== null ? (cause as { code?: unknown }).code : undefined;
  return typeof code === "string" ? code : "";
}
