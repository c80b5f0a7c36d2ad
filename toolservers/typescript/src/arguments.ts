/**
 * One call's arguments: parsed once from the model's JSON text, validated against the tool's
 * input schema (Ajv, JSON Schema 2020-12), and, when they break it, a message written for the
 * model that names each offending argument, what was expected and what was sent.
 *
 * Integers beyond 2^53 stay exact: text holding a long digit run is parsed with lossless-json,
 * and such an integer reaches the handler as a `bigint` (validated as the number it is).
 */
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import { isSafeNumber, parse as parseLossless } from "lossless-json";

import { ToolDefinitionError } from "./errors.js";
import { isObject, type JsonSchema } from "./tool.js";

const MAX_SHOWN = 80;
// A run of 16 digits may exceed 2^53; shorter integers are exact as JavaScript numbers.
const LONG_DIGITS = /\d{16}/;

/** The arguments text is not a JSON object: a malformed request, answered INVALID_ARGUMENT. */
export class MalformedArguments extends Error {}

const ajv = new Ajv2020({ allErrors: true, strict: false, validateFormats: false, verbose: true });

/** Validates one tool's arguments; built once, when the server starts. */
export class ArgumentsValidator {
  readonly #toolName: string;
  readonly #validate: ValidateFunction;
  readonly #expected: Map<string, string>;

  constructor(toolName: string, schema: JsonSchema) {
    this.#toolName = toolName;
    try {
      this.#validate = ajv.compile(schema);
    } catch (error) {
      throw new ToolDefinitionError(
        `tool ${JSON.stringify(toolName)}: the input schema does not compile: ${(error as Error).message}`,
      );
    }
    const properties = isObject(schema.properties) ? schema.properties : {};
    this.#expected = new Map(
      Object.entries(properties).map(([name, sub]) => [name, expectation(isObject(sub) ? sub : {}, schema)]),
    );
  }

  /**
   * Parses and validates; returns the arguments, or the message for the model.
   *
   * @throws MalformedArguments when the text is not a JSON object.
   */
  check(text: string): { args: Record<string, unknown> } | { invalid: string } {
    const args = parseArguments(text);
    const valid = this.#validate(LONG_DIGITS.test(text) ? withoutBigInts(args) : args);
    if (valid) return { args };
    return { invalid: this.#message(this.#validate.errors ?? []) };
  }

  #message(errors: readonly ErrorObject[]): string {
    const name = this.#toolName;
    const lines = [`Invalid arguments for ${name}:`];
    const seen = new Set<string>();
    for (const error of errors) {
      const line = this.#line(error);
      if (line && !seen.has(line)) {
        seen.add(line);
        lines.push(line);
      }
    }
    lines.push(`Call ${name} again with corrected arguments.`);
    return lines.join("\n");
  }

  #line(error: ErrorObject): string | undefined {
    const where = path(error.instancePath);
    if (error.keyword === "required") {
      const missing = String(error.params.missingProperty);
      const at = where === "(arguments)" ? missing : `${where}.${missing}`;
      const expected = where === "(arguments)" ? this.#expected.get(missing) : undefined;
      return `- ${at}: required argument is missing${expected ? `; expected ${expected}` : ""}`;
    }
    if (error.keyword === "additionalProperties" || error.keyword === "unevaluatedProperties") {
      const extra = String(error.params.additionalProperty ?? error.params.unevaluatedProperty);
      if (where === "(arguments)") {
        const allowed = [...this.#expected.keys()].join(", ") || "no arguments";
        return `- ${extra}: unknown argument; ${this.#toolName} takes: ${allowed}`;
      }
      return `- ${where}.${extra}: unknown field; remove it`;
    }
    // anyOf/oneOf repeat each branch's error first; their own line says enough.
    if (error.keyword === "if") return undefined;
    return `- ${where}: ${error.message ?? "is invalid"}; got ${shown(error.data)}`;
  }
}

/**
 * Parses the arguments text once (empty means `{}`).
 *
 * @throws MalformedArguments when it is not a JSON object.
 */
export function parseArguments(text: string): Record<string, unknown> {
  if (!text.trim()) return {};
  let value: unknown;
  try {
    value = LONG_DIGITS.test(text)
      ? parseLossless(text, undefined, (digits) =>
          isSafeNumber(digits) || !/^-?\d+$/.test(digits) ? Number(digits) : BigInt(digits),
        )
      : JSON.parse(text);
  } catch (error) {
    throw new MalformedArguments(`arguments must be a JSON object: ${(error as Error).message}`);
  }
  if (!isObject(value)) {
    const kind = value === null ? "null" : Array.isArray(value) ? "an array" : `a ${typeof value}`;
    throw new MalformedArguments(`arguments must be a JSON object, got ${kind}`);
  }
  return value;
}

/** A copy with each bigint as the (inexact) number it is, for the validator only. */
function withoutBigInts(value: unknown): unknown {
  if (typeof value === "bigint") return Number(value);
  if (Array.isArray(value)) return value.map(withoutBigInts);
  if (isObject(value)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withoutBigInts(v)]));
  }
  return value;
}

/** `/items/0/sku` → `items[0].sku`. */
function path(pointer: string): string {
  if (!pointer) return "(arguments)";
  let text = "";
  for (const raw of pointer.slice(1).split("/")) {
    const part = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    text += /^\d+$/.test(part) ? `[${part}]` : text ? `.${part}` : part;
  }
  return text;
}

function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value, (_, v: unknown) => (typeof v === "bigint" ? v.toString() : v)) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length <= MAX_SHOWN ? text : `${text.slice(0, MAX_SHOWN - 3)}...`;
}

/** In a few words, what a schema accepts: `integer or null`, `one of "a", "b"`. */
function expectation(schema: { [key: string]: unknown }, root: JsonSchema, depth = 0): string {
  if (depth > 3) return "a value";
  const ref = schema.$ref;
  if (typeof ref === "string" && ref.startsWith("#/$defs/") && isObject(root.$defs)) {
    const target = root.$defs[ref.slice("#/$defs/".length)];
    if (isObject(target)) return expectation(target, root, depth + 1);
  }
  if (Array.isArray(schema.enum)) return `one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}`;
  if ("const" in schema) return `exactly ${JSON.stringify(schema.const)}`;
  for (const key of ["anyOf", "oneOf"]) {
    const branches = schema[key];
    if (Array.isArray(branches)) {
      return branches.map((b) => expectation(isObject(b) ? b : {}, root, depth + 1)).join(" or ");
    }
  }
  if (schema.type === "array" && isObject(schema.items)) {
    return `array of ${expectation(schema.items, root, depth + 1)}`;
  }
  if (typeof schema.type === "string") return schema.type;
  if (Array.isArray(schema.type)) return schema.type.join(" or ");
  return "a value";
}
