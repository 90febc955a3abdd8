import createClient, { type Client } from "openapi-fetch";
import { KeepstoneError, isRecord, wrongShape } from "./errors.js";
import type { components, paths } from "./generated/schema.js";
import { readAnswers, transport } from "./transport.js";

type Schemas = components["schemas"];

/** A document, as `GET /api/memory/doc` answers it. */
export type Document = Schemas["DocOut"];
/** What a listing says of one document. */
export type DocumentInfo = Schemas["DocumentInfoOut"];
/** The answer of every write: `created` says whether the path held no document before. */
export type WriteResult = Schemas["WriteOut"];
/** One version of a document (`size` in bytes; `deleted` for a deletion marker). */
export type Version = Schemas["VersionOut"];
/** A search's answer: `results` best first, `pending` chunks searched by keyword only,
 * `hint` when nothing was relevant enough. */
export type SearchResult = Schemas["SearchOut"];
export type SearchHit = Schemas["SearchHitOut"];
/** The spaces the caller may read that exist, with their usage. */
export type Spaces = Schemas["SpacesOut"];
export type Usage = Schemas["UsageOut"];
export type Visibility = NonNullable<
  paths["/api/memory/doc"]["get"]["parameters"]["query"]["visibility"]
>;

/** An edit: replace the one exact occurrence of `old` with `new`, or insert `text` as whole
 * lines after line `insert_line` (0 = at the top). */
export type Edit = { old: string; new: string } | { insert_line: number; text: string };

/** An instant: a Date, or ISO 8601 text (naive = UTC, as the server reads it). */
export type Instant = Date | string;

export interface MemoryOptions {
  /** The server, e.g. `http://127.0.0.1:8420`. */
  baseUrl: string;
  /** An API key (`keepstone admin create-api-key`); sent as `Authorization: Bearer`. */
  apiKey: string;
  /** The space's name (default `default`). */
  name?: string;
  /** The space's visibility: default `bot` when `bot` is given, else `project`. */
  visibility?: Visibility;
  /** Project key (visibilities `project`, `bot`). */
  project?: string;
  /** Bot id (visibility `bot`). */
  bot?: string;
  /** `X-Keepstone-Team`: only for a credential of a user in several teams (an API key
   * already names its team). */
  team?: string;
  /** Milliseconds a request may take, its whole answer read (default 60000, as the Python
   * client's 60 s; `Infinity`: no limit). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one); it is given a `Request`. */
  fetch?: (request: Request) => Promise<Response>;
}

export interface IfMatch {
  /** Only if the document's etag is still this one (else `precondition_failed`, 412). */
  if_match?: string;
}

export interface SearchOptions {
  /** 1-50 hits (default 10). */
  limit?: number;
  path_prefix?: string;
  /** Hits scoring at least this (-1 to 1) instead of the relevance floor. */
  min_score?: number;
  since?: Instant;
  until?: Instant;
  /** Front-matter tags every hit's document holds. */
  tags?: string[] | string;
  /** A recency prior's half-life in days (off by default). */
  recency_days?: number;
}

type Space = { name: string; visibility: Visibility; project?: string; bot?: string };

/**
 * One knowledge space on a Keepstone server: read, write, edit, move, delete, list, search
 * and the history of its Markdown documents, as the Python `keepstone.Memory.connect`
 * reaches it. Every refusal is thrown as a {@link KeepstoneError} with the server's `code`,
 * `message` and `status`.
 */
export class Memory {
  readonly baseUrl: string;
  readonly space: Readonly<Space>;
  private readonly client: Client<paths>;

  constructor(options: MemoryOptions) {
    this.baseUrl = serverUrl(options.baseUrl);
    if (!options.apiKey) throw usage("give an API key (keepstone admin create-api-key)");
    const visibility = options.visibility ?? (options.bot === undefined ? "project" : "bot");
    this.space = {
      name: options.name ?? "default",
      visibility,
      ...(options.project === undefined ? {} : { project: options.project }),
      ...(options.bot === undefined ? {} : { bot: options.bot }),
    };
    const key = visibleAscii(options.apiKey, "apiKey");
    const headers: Record<string, string> = { Authorization: `Bearer ${key}` };
    if (options.team) headers["X-Keepstone-Team"] = visibleAscii(options.team, "team");
    const fetch = options.fetch ?? ((request: Request) => globalThis.fetch(request));
    this.client = createClient<paths>({
      baseUrl: this.baseUrl,
      headers,
      redirect: "manual",
      fetch: transport(fetch, this.baseUrl, timeout(options.timeoutMs)),
    });
    this.client.use(readAnswers(this.baseUrl));
  }

  /** The document at `path`; with `version`, that version of it; with `as_of`, the
   * document as it was at that instant. `not_found` when there is none. */
  async read(path: string, options: { version?: number; as_of?: Instant } = {}): Promise<Document> {
    const query = { ...this.space, path, ...options, as_of: instant(options.as_of, "as_of") };
    return this.call(() => this.client.GET("/api/memory/doc", { params: { query } }), DOCUMENT);
  }

  /** Create or replace the document at `path` (`created` says which). */
  async write(path: string, content: string, options: IfMatch = {}): Promise<WriteResult> {
    return this.call(
      () =>
        this.client.PUT("/api/memory/doc", {
          params: { query: { ...this.space, path }, header: ifMatch(options) },
          body: { content },
        }),
      WRITTEN,
    );
  }

  /** Change part of the document at `path` in one request: `{old, new}` replaces the one
   * exact occurrence of `old`; `{insert_line, text}` inserts `text` as whole lines after
   * that line (0 = at the top). `invalid_edit` when `old` is absent or occurs several
   * times (`details.occurrences`, `details.lines`) or the line is out of range. */
  async edit(path: string, edit: Edit, options: IfMatch = {}): Promise<WriteResult> {
    return this.call(
      () =>
        this.client.POST("/api/memory/doc/edit", {
          params: { query: { ...this.space, path }, header: ifMatch(options) },
          body: edit,
        }),
      WRITTEN,
    );
  }

  /** Move the document at `path` to `to`, atomically; `already_exists` when a document is
   * at `to`, unless `overwrite`. The answer is the document at its new path. */
  async move(
    path: string,
    to: string,
    options: IfMatch & { overwrite?: boolean } = {},
  ): Promise<WriteResult> {
    const query = { ...this.space, path, to, overwrite: options.overwrite ?? false };
    return this.call(
      () =>
        this.client.POST("/api/memory/doc/move", {
          params: { query, header: ifMatch(options) },
        }),
      WRITTEN,
    );
  }

  /** Remove the document at `path`; `not_found` when there is none. */
  async delete(path: string, options: IfMatch = {}): Promise<void> {
    await this.call(() =>
      this.client.DELETE("/api/memory/doc", {
        params: { query: { ...this.space, path }, header: ifMatch(options) },
        parseAs: "text",
      }),
    );
  }

  /** The documents under directory prefix `dir` ('' = all), sorted by path; with `as_of`,
   * as the space held them at that instant. */
  async list(dir = "", options: { as_of?: Instant } = {}): Promise<DocumentInfo[]> {
    const query = { ...this.space, dir, as_of: instant(options.as_of, "as_of") };
    const body = await this.call(
      () => this.client.GET("/api/memory/docs", { params: { query } }),
      ["a listing of documents", { documents: "array" }],
    );
    return body.documents;
  }

  /** The best sections of the space for `query`, best first (docs/search.md). */
  async search(query: string, options: SearchOptions = {}): Promise<SearchResult> {
    const { since, until, tags, ...rest } = options;
    const params = {
      ...this.space,
      q: query,
      ...rest,
      since: instant(since, "since"),
      until: instant(until, "until"),
      tags: Array.isArray(tags) ? tags.join(",") : tags,
    };
    return this.call(
      () => this.client.GET("/api/memory/search", { params: { query: params } }),
      ["a search's answer", { results: "array" }],
    );
  }

  /** The versions of the document at `path`, newest first, the live one included. */
  async versions(path: string): Promise<Version[]> {
    const query = { ...this.space, path };
    const body = await this.call(
      () => this.client.GET("/api/memory/doc/versions", { params: { query } }),
      ["a list of versions", { versions: "array" }],
    );
    return body.versions;
  }

  /** A unified diff of the document from version `from` to version `to` (default: the
   * newest); '' when they are equal. */
  async diff(path: string, from: number, to?: number): Promise<string> {
    const query = { ...this.space, path, from, ...(to === undefined ? {} : { to }) };
    const text = await this.call(() =>
      this.client.GET("/api/memory/doc/diff", { params: { query }, parseAs: "text" }),
    );
    return text ?? ""; // an empty answer comes back as no data at all
  }

  /** Make `version` of the document current again: a new write of its content. */
  async restore(path: string, version: number, options: IfMatch = {}): Promise<WriteResult> {
    return this.call(
      () =>
        this.client.POST("/api/memory/doc/restore", {
          params: { query: { ...this.space, path, version }, header: ifMatch(options) },
        }),
      WRITTEN,
    );
  }

  /** Bytes used by the space and by all of the team's spaces, against their quotas. */
  async usage(): Promise<Usage> {
    const query = { ...this.space };
    return this.call(() => this.client.GET("/api/memory/usage", { params: { query } }), USAGE);
  }

  /** Every space the key may read that exists (this one need not be among them). */
  async spaces(): Promise<Spaces> {
    return this.call(
      () => this.client.GET("/api/memory/spaces"),
      ["a list of spaces", { spaces: "array" }],
    );
  }

  /** The answer's data, checked to be of `shape` when given. What went wrong is thrown by
   * the transport as a KeepstoneError: the caller's mistake found before sending, an
   * unreachable server, an error answer, a 2xx that is not JSON (src/transport.ts). */
  private async call<T>(
    send: () => Promise<{ data?: T; error?: unknown; response: Response }>,
    shape?: Shape<T>,
  ): Promise<T> {
    const answer = await send();
    if (shape) checkShape(answer.data, shape, answer.response.status, this.baseUrl);
    return answer.data as T;
  }
}

/** The JSON type a field of an answer must have. */
type Kind = "string" | "number" | "boolean" | "array";

/** What an answer must be for the class to hand it on: its name in a message, and the kinds
 * of the fields the Python client reads of it. */
type Shape<T> = readonly [what: string, fields: { readonly [K in keyof T]?: Kind }];

const DOCUMENT: Shape<Document> = [
  "a document",
  { path: "string", content: "string", etag: "string", size_bytes: "number", updated_at: "string" },
];
const WRITTEN: Shape<WriteResult> = [
  "a write's answer",
  { path: "string", etag: "string", size_bytes: "number", created: "boolean" },
];
const USAGE: Shape<Usage> = [
  "a space's usage",
  {
    space_id: "string",
    used_bytes: "number",
    quota_bytes: "number",
    team_used_bytes: "number",
    team_quota_bytes: "number",
  },
];
const KIND_NAMES: Readonly<Record<Kind, string>> = {
  string: "a string",
  number: "a number",
  boolean: "a boolean",
  array: "a list",
};

/** `data` when it is a JSON object with `shape`'s fields; else the answer of `status` was
 * JSON of another shape (another server's, or a proxy's), thrown as such. */
function checkShape<T>(data: unknown, shape: Shape<T>, status: number, baseUrl: string): void {
  const [what, fields] = shape;
  if (!isRecord(data)) {
    throw wrongShape(status, what, `it is ${kindOf(data)}, not an object`, baseUrl);
  }
  for (const [name, kind] of Object.entries(fields) as [string, Kind][]) {
    const value = data[name];
    if (value === undefined) throw wrongShape(status, what, `"${name}" is missing`, baseUrl);
    const found = kindOf(value);
    if (found !== KIND_NAMES[kind]) {
      throw wrongShape(status, what, `"${name}" is ${found}, not ${KIND_NAMES[kind]}`, baseUrl);
    }
  }
}

/** What a JSON value is, as a message names it. */
function kindOf(value: unknown): string {
  if (Array.isArray(value)) return "a list";
  if (value === null) return "null";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

function ifMatch(options: IfMatch): { "If-Match"?: string } {
  const etag = options.if_match;
  return etag === undefined ? {} : { "If-Match": `"${visibleAscii(etag, "if_match")}"` };
}

/** `value` when an HTTP header can carry it as the Python client sends it (visible ASCII,
 * no space: an API key, a team id or an etag holds nothing else); else the caller's own
 * mistake, `invalid_request` naming it, before anything is sent (fetch would refuse it
 * with an error that reads as an unreachable server). */
function visibleAscii(value: string, name: string): string {
  if (!/^[\x21-\x7e]*$/.test(value)) {
    throw usage(
      `${name} holds a space, a control character or a letter outside ASCII, which an HTTP ` +
        "header cannot carry: copy it again from where it was made",
    );
  }
  return value;
}

/** `url` as the client's base URL (no trailing slash), or `invalid_request` naming it: an
 * http:// or https:// URL with a host, as the Python client takes it. */
function serverUrl(url: string): string {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if ((parsed?.protocol === "http:" || parsed?.protocol === "https:") && parsed.hostname) {
    return url.replace(/\/+$/, "");
  }
  const problem = url ? "it needs http:// or https:// and a host" : "it is empty";
  throw usage(
    `baseUrl ${JSON.stringify(url)} cannot be used (${problem}); ` +
      "give one like http://127.0.0.1:8420",
  );
}

/** The longest timer a runtime keeps (a longer one fires at once, in Node). */
const LONGEST_TIMER_MS = 2 ** 31 - 1;

/** Milliseconds a request may take: `ms` when it is a number above 0 that a timer can hold,
 * or `Infinity` (no limit); 60000 when not given. */
function timeout(ms: number | undefined): number {
  if (ms === undefined) return 60_000;
  if (typeof ms !== "number" || !(ms > 0) || (ms > LONGEST_TIMER_MS && ms !== Infinity)) {
    throw usage(
      `timeoutMs is ${String(ms)}; give a number of milliseconds from 1 to ` +
        `${LONGEST_TIMER_MS} (default 60000), or Infinity for no limit`,
    );
  }
  return ms;
}

/** An instant as the API takes it: a `Date` (a valid one) as ISO 8601, text as given. */
function instant(at: Instant | undefined, name: string): string | undefined {
  if (!(at instanceof Date)) return at;
  if (Number.isNaN(at.getTime())) {
    throw usage(`${name} is an invalid Date; give a Date that holds a time, or ISO 8601 text`);
  }
  return at.toISOString();
}

function usage(message: string): KeepstoneError {
  return new KeepstoneError("invalid_request", message, 400);
}
