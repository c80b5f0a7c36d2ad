/**
 * Declaring a tool: what the author writes, and the checks that turn a mistake into a
 * {@link ToolDefinitionError} when the tool is registered instead of a confusing failure on
 * some later call.
 */
import type { Metadata } from "@grpc/grpc-js";

import { ToolDefinitionError } from "./errors.js";
import type { CallerIdentity } from "./identity.js";

/** A JSON Schema (draft 2020-12), as a plain object. */
export type JsonSchema = { readonly [keyword: string]: unknown };

/** What a tool's handler is told about its call. */
export interface ToolContext {
  /** The caller's id for the call (the model's tool-call id when the sidecar calls). */
  readonly callId: string;
  /** The tool's name. */
  readonly toolName: string;
  /**
   * Aborted when the call's deadline passes or the caller cancels: pass it to anything slow
   * (`fetch`, timers, database drivers) and stop when it fires.
   */
  readonly signal: AbortSignal;
  /** The call's deadline (milliseconds since the epoch), or `undefined` when it has none. */
  readonly deadline: number | undefined;
  /** The gRPC metadata the caller sent (trace context, tenant...). */
  readonly metadata: Metadata;
  /**
   * Who the call serves: principal, session, run, call and the session's labels, as the sidecar
   * sent them. `verified` is true when the server verified the sidecar's signed assertion
   * (`identityKeysFile`, `--identity-keys`); only then does it prove anything.
   *
   * @throws MalformedIdentity when read on a server that does not verify and the identity
   *   metadata is malformed (it did not come from a sidecar).
   */
  readonly identity: CallerIdentity;
  /** Milliseconds before the deadline, or `undefined` when the caller set none. */
  timeRemaining(): number | undefined;
  /**
   * Sends a `ToolProgress` to a `StreamTool` caller and resolves once it is written; on
   * `CallTool` there is nowhere to send it and it resolves at once.
   */
  reportProgress(progress: number, total?: number, message?: string): Promise<void>;
}

/**
 * A tool's handler: gets the validated arguments and its context, returns the output. A
 * string is sent as is; anything else as JSON. Throwing is a failure the model reads.
 */
export type ToolHandler<Args> = (args: Args, context: ToolContext) => unknown;

/** How a tool is declared. Every flag defaults to the safe choice. */
export interface ToolDefinition {
  /** The name the model calls: 1 to 64 of `[A-Za-z0-9_-]`, unique per server. */
  name: string;
  /** What it does and when to use it, written for the model. Required. */
  description: string;
  /**
   * The JSON Schema (draft 2020-12) of the arguments; its root is an object schema
   * (`{type: "object", properties: {...}, required: [...]}`). Without
   * `additionalProperties`, unknown arguments are refused. Unset: no arguments.
   */
  input?: JsonSchema;
  /** The JSON Schema of the output, for the model and the sidecar; not enforced. */
  output?: JsonSchema;
  /** Changes nothing: may run concurrently with any reader, and early. Default false. */
  readOnly?: boolean;
  /** Twice equals once: a failed call may be retried or hedged. Default false. */
  idempotent?: boolean;
  /** Its effect cannot be undone. Default false. */
  destructive?: boolean;
  /** A person approves each call before it runs. Default false. */
  requiresApproval?: boolean;
  /** Resource keys it reads, such as `"sku:{sku}"`; `{field}` names a top-level argument. */
  readKeys?: readonly string[];
  /** Resource keys it writes; calls with a conflicting key run in the model's order. */
  writeKeys?: readonly string[];
  /** Seconds one call may take when the caller sets nothing shorter. Default: the caller decides. */
  timeout?: number;
  /** Seconds a result may be cached; read-only tools only. Default: never cached. */
  cacheTtl?: number;
  /** Free-form version, part of every cache key. Default: the server's version. */
  version?: string;
  /** The output fields the model needs (`"status"`, `"parcel.eta"`). Default: all of it. */
  resultFields?: readonly string[];
}

/** A registered tool: its declaration checked and completed. */
export interface Tool {
  readonly name: string;
  readonly description: string;
  readonly input: JsonSchema;
  readonly output: JsonSchema | undefined;
  readonly readOnly: boolean;
  readonly idempotent: boolean;
  readonly destructive: boolean;
  readonly requiresApproval: boolean;
  readonly readKeys: readonly string[];
  readonly writeKeys: readonly string[];
  readonly timeout: number | undefined;
  readonly cacheTtl: number | undefined;
  readonly version: string;
  readonly resultFields: readonly string[];
  readonly handler: ToolHandler<never>;
}

// The pattern model APIs (OpenAI, Groq) accept for function names.
const NAME = /^[A-Za-z0-9_-]{1,64}$/;
const PLACEHOLDER = /\{([^{}]*)\}/g;

/** Checks one declaration and completes it with the defaults. */
export function defineTool(
  definition: ToolDefinition,
  handler: ToolHandler<never>,
  serverVersion: string,
): Tool {
  const rawName: unknown = definition?.name;
  const where = `tool ${JSON.stringify(rawName ?? null)}`;
  const fail = (problem: string): never => {
    throw new ToolDefinitionError(`${where}: ${problem}`);
  };
  if (typeof rawName !== "string" || !NAME.test(rawName)) {
    fail(
      "invalid name; use 1 to 64 characters of letters, digits, '_' and '-' " +
        "(model APIs reject other names)",
    );
  }
  const name = rawName as string;
  if (typeof handler !== "function") {
    fail("no handler; pass a function (args, context) => output as the second argument");
  }
  if (typeof definition.description !== "string" || !definition.description.trim()) {
    fail("no description; say what the tool does and when to use it: the model reads it");
  }
  const readOnly = definition.readOnly ?? false;
  const destructive = definition.destructive ?? false;
  if (readOnly && destructive) fail("a tool cannot be both readOnly and destructive");
  if (definition.cacheTtl !== undefined && !readOnly) {
    fail("cacheTtl needs readOnly: true; serving a cached result would skip the tool's effect");
  }
  const input = inputSchema(definition.input, fail);
  const properties = Object.keys((input.properties as object | undefined) ?? {});
  const readKeys = keys("readKeys", definition.readKeys, properties, fail);
  const writeKeys = keys("writeKeys", definition.writeKeys, properties, fail);
  if (readOnly && writeKeys.length) fail("a readOnly tool cannot declare writeKeys");
  const output = definition.output;
  if (output !== undefined && !isObject(output)) fail("output must be a JSON Schema object");
  const resultFields = fieldList(definition.resultFields, output, fail);
  return {
    name,
    description: definition.description.trim(),
    input,
    output,
    readOnly,
    idempotent: definition.idempotent ?? false,
    destructive,
    requiresApproval: definition.requiresApproval ?? false,
    readKeys,
    writeKeys,
    timeout: seconds("timeout", definition.timeout, fail),
    cacheTtl: seconds("cacheTtl", definition.cacheTtl, fail),
    version: definition.version ?? serverVersion,
    resultFields,
    handler,
  };
}

function inputSchema(schema: JsonSchema | undefined, fail: (problem: string) => never): JsonSchema {
  if (schema === undefined) return { type: "object", properties: {}, additionalProperties: false };
  if (!isObject(schema)) fail("input must be a JSON Schema object, such as {type: \"object\", properties: {...}}");
  if (schema.type !== "object") {
    fail(
      `the input schema's root must be {type: "object", ...} (arguments are named), ` +
        `got type ${JSON.stringify(schema.type ?? null)}`,
    );
  }
  if (schema.properties !== undefined && !isObject(schema.properties)) {
    fail("the input schema's properties must be an object of schemas");
  }
  const required = schema.required ?? [];
  if (!Array.isArray(required) || required.some((r) => typeof r !== "string")) {
    fail("the input schema's required must be a list of property names");
  }
  const known = Object.keys((schema.properties as object | undefined) ?? {});
  for (const name of required as string[]) {
    if (!known.includes(name) && schema.additionalProperties === undefined) {
      fail(`required names ${JSON.stringify(name)}, which is not one of the properties ${JSON.stringify(known)}`);
    }
  }
  return "additionalProperties" in schema ? schema : { ...schema, additionalProperties: false };
}

function keys(
  what: string,
  value: readonly string[] | undefined,
  properties: readonly string[],
  fail: (problem: string) => never,
): readonly string[] {
  if (value === undefined) return [];
  if (typeof value === "string") {
    fail(`${what} takes a list of keys, got the string ${JSON.stringify(value)}; write ${what}: [${JSON.stringify(value)}]`);
  }
  if (!Array.isArray(value)) fail(`${what} must be a list of keys such as ["sku:{sku}"]`);
  for (const key of value) {
    if (typeof key !== "string" || !key) fail(`${what} entries must be non-empty strings`);
    for (const match of key.matchAll(PLACEHOLDER)) {
      const field = match[1] ?? "";
      if (!properties.includes(field)) {
        fail(
          `${what} entry ${JSON.stringify(key)} uses {${field}}, but a placeholder must name a ` +
            `top-level argument, one of ${JSON.stringify(properties)}`,
        );
      }
    }
  }
  return [...value];
}

function fieldList(
  value: readonly string[] | undefined,
  output: JsonSchema | undefined,
  fail: (problem: string) => never,
): readonly string[] {
  if (value === undefined) return [];
  if (typeof value === "string") {
    fail(`resultFields takes a list of field names, got the string ${JSON.stringify(value)}`);
  }
  let schema = output;
  if (schema?.type === "array" && isObject(schema.items)) schema = schema.items;
  const known = isObject(schema?.properties) ? Object.keys(schema.properties) : undefined;
  for (const path of value) {
    if (typeof path !== "string" || !path || path.split(".").some((part) => !part)) {
      fail(`resultFields entries are field names or dotted paths such as 'parcel.eta', got ${JSON.stringify(path)}`);
    }
    const head = path.split(".")[0] ?? "";
    if (known !== undefined && known.length && !known.includes(head)) {
      fail(`resultFields entry ${JSON.stringify(path)} names no field of the output schema, which declares ${JSON.stringify(known)}`);
    }
  }
  return [...value];
}

function seconds(what: string, value: number | undefined, fail: (problem: string) => never): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    fail(`${what} is a positive number of seconds, got ${JSON.stringify(value)}`);
  }
  return value;
}

export function isObject(value: unknown): value is { [key: string]: unknown } {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
