import createClient, { type Client } from "openapi-fetch";
import { KeepstoneError, errorFromAnswer, unreachable } from "./errors.js";
import type { components, paths } from "./generated/schema.js";

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
  /** The fetch to use (default: the global one). */
  fetch?: typeof globalThis.fetch;
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
    if (!options.baseUrl) throw usage("give the server's URL, e.g. 'http://127.0.0.1:8420'");
    if (!options.apiKey) throw usage("give an API key (keepstone admin create-api-key)");
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    const visibility = options.visibility ?? (options.bot === undefined ? "project" : "bot");
    this.space = {
      name: options.name ?? "default",
      visibility,
      ...(options.project === undefined ? {} : { project: options.project }),
      ...(options.bot === undefined ? {} : { bot: options.bot }),
    };
    const key = headerValue(options.apiKey, "apiKey");
    const headers: Record<string, string> = { Authorization: `Bearer ${key}` };
    if (options.team) headers["X-Keepstone-Team"] = headerValue(options.team, "team");
    this.client = createClient<paths>({
      baseUrl: this.baseUrl,
      headers,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    });
  }

  /** The document at `path`; with `version`, that version of it; with `as_of`, the
   * document as it was at that instant. `not_found` when there is none. */
  async read(path: string, options: { version?: number; as_of?: Instant } = {}): Promise<Document> {
    const query = { ...this.space, path, ...options, as_of: instant(options.as_of, "as_of") };
    return this.call(() => this.client.GET("/api/memory/doc", { params: { query } }));
  }

  /** Create or replace the document at `path` (`created` says which). */
  async write(path: string, content: string, options: IfMatch = {}): Promise<WriteResult> {
    return this.call(() =>
      this.client.PUT("/api/memory/doc", {
        params: { query: { ...this.space, path }, header: ifMatch(options) },
        body: { content },
      }),
    );
  }

  /** Change part of the document at `path` in one request: `{old, new}` replaces the one
   * exact occurrence of `old`; `{insert_line, text}` inserts `text` as whole lines after
   * that line (0 = at the top). `invalid_edit` when `old` is absent or occurs several
   * times (`details.occurrences`, `details.lines`) or the line is out of range. */
  async edit(path: string, edit: Edit, options: IfMatch = {}): Promise<WriteResult> {
    return this.call(() =>
      this.client.POST("/api/memory/doc/edit", {
        params: { query: { ...this.space, path }, header: ifMatch(options) },
        body: edit,
      }),
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
    return this.call(() =>
      this.client.POST("/api/memory/doc/move", {
        params: { query, header: ifMatch(options) },
      }),
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
    const body = await this.call(() => this.client.GET("/api/memory/docs", { params: { query } }));
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
    return this.call(() => this.client.GET("/api/memory/search", { params: { query: params } }));
  }

  /** The versions of the document at `path`, newest first, the live one included. */
  async versions(path: string): Promise<Version[]> {
    const query = { ...this.space, path };
    const body = await this.call(() =>
      this.client.GET("/api/memory/doc/versions", { params: { query } }),
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
    return this.call(() =>
      this.client.POST("/api/memory/doc/restore", {
        params: { query: { ...this.space, path, version }, header: ifMatch(options) },
      }),
    );
  }

  /** Bytes used by the space and by all of the team's spaces, against their quotas. */
  async usage(): Promise<Usage> {
    const query = { ...this.space };
    return this.call(() => this.client.GET("/api/memory/usage", { params: { query } }));
  }

  /** Every space the key may read that exists (this one need not be among them). */
  async spaces(): Promise<Spaces> {
    return this.call(() => this.client.GET("/api/memory/spaces"));
  }

  /** The answer's data, or the server's refusal (or an unreachable server) thrown. */
  private async call<T>(
    send: () => Promise<{ data?: T; error?: unknown; response: Response }>,
  ): Promise<T> {
    let answer: { data?: T; error?: unknown; response: Response };
    try {
      answer = await send();
    } catch (cause) {
      if (cause instanceof KeepstoneError) throw cause; // the caller's own, found before sending
      throw unreachable(this.baseUrl, cause);
    }
    if (!answer.response.ok) throw errorFromAnswer(answer.response.status, answer.error);
    return answer.data as T;
  }
}

function ifMatch(options: IfMatch): { "If-Match"?: string } {
  const etag = options.if_match;
  return etag === undefined ? {} : { "If-Match": `"${headerValue(etag, "if_match")}"` };
}

/** `value` when an HTTP header can carry it (visible ASCII and spaces); else the caller's
 * own mistake, `invalid_request` naming it, before anything is sent (fetch would refuse
 * it with an error that reads as an unreachable server). */
function headerValue(value: string, name: string): string {
  if (!/^[\x20-\x7e]*$/.test(value)) {
    throw usage(`${name} holds a character an HTTP header cannot carry; give it as it was given`);
  }
  return value;
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
