/** How a tool server is served, and the command line that sets it. */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { LEVELS, type LogLevel } from "./logger.js";

/** Settings for {@link ToolServer.listen} and {@link ToolServer.serve}. */
export interface ServeOptions {
  /** Interface to listen on. Default `127.0.0.1`: a sidecar's tools are local unless exposed. */
  host?: string;
  /** Port to listen on. Default 0: any free port, announced. */
  port?: number;
  /** Seconds running calls get to finish after SIGTERM before they are cancelled. Default 10. */
  grace?: number;
  /**
   * PEM certificate chain to serve TLS with (with `tlsKeyFile`); both files are reread when
   * they change (checked every 5 s), and new connections get the new certificate. Default: plaintext.
   */
  tlsCertFile?: string;
  /** The PEM private key of `tlsCertFile`. */
  tlsKeyFile?: string;
  /** PEM CA bundle callers' certificates must chain to: mutual TLS. */
  tlsClientCaFile?: string;
  /**
   * A bearer token every tool call must carry (`authorization: Bearer TOKEN`; the sidecar
   * sends it with `tool_servers[].token_env` or `token_file`). Health and reflection stay open.
   */
  token?: string;
  /** Drain on SIGTERM and SIGINT (for `serve`). Default true. */
  handleSignals?: boolean;
  /** Aborting it drains the server, as SIGTERM does (for `serve`). */
  signal?: AbortSignal;
  /**
   * Receives the line `listening on HOST:PORT` once the server accepts connections. Default:
   * written to stdout, where launchers (`sidecar.testing` among them) read the address.
   */
  announce?: (line: string) => void;
  /** Log level of the stderr log: `debug`, `info` (default), `warn`, `error`. */
  logLevel?: LogLevel;
  /**
   * The sidecar's public keys (a JWKS, as `agent-sidecar identity jwks` prints it, or a PEM
   * public key): every call's signed identity assertion is verified with them before its
   * handler runs, and a call whose assertion fails ends UNAUTHENTICATED. Reread within a
   * second of a change. Default: none, and handlers see the plain, unverified identity.
   * Give this or `identityKeysFrom`.
   */
  identityKeysFile?: string;
  /**
   * Fetch the sidecar's public keys from a sidecar instead of a file: its gRPC target
   * (`host:port` or `unix:/path`), which serves `agentsidecar.v1.IdentityKeysService`. Fetched
   * in the background from the start: the server serves at once, and until the first answer a
   * call carrying an assertion is refused UNAUTHENTICATED (`the identity keys are not fetched
   * yet`); a failed fetch is tried again after 1 s, doubling to 30 s; then again every
   * `max_age` of the answer, and soon (at most once every 10 s) after an assertion names a
   * kid the keys lack. A failed refresh keeps the keys. Plaintext only to a local target (a
   * loopback address, `localhost`, `unix:`); any other is dialled with TLS.
   */
  identityKeysFrom?: string;
  /**
   * PEM CA bundle the TLS certificate of `identityKeysFrom` must chain to (then TLS is used
   * even to a local target). Default: the system's roots. A file that cannot be read fails the start.
   */
  identityKeysCa?: string;
  /** This server's name in the sidecar's configuration (`tool_servers[].name`); needed with the identity keys. */
  identityAudience?: string;
  /** The issuer the sidecar signs as (`auth.tool_assertion.issuer`). Default `agent-sidecar`. */
  identityIssuer?: string;
  /**
   * Refuse calls that carry no assertion (UNAUTHENTICATED). Default false: they run, with the
   * plain identity (`context.identity.verified` false).
   */
  identityRequired?: boolean;
  /** Seconds the clocks of the sidecar and this server may be apart when an assertion's lifetime is checked. Default 10. */
  identityLeeway?: number;
}

/** The problem with a set of options, or undefined when there is none. */
export function optionsProblem(options: ServeOptions): string | undefined {
  if ((options.tlsCertFile === undefined) !== (options.tlsKeyFile === undefined)) {
    return "tlsCertFile and tlsKeyFile go together";
  }
  if (options.tlsClientCaFile !== undefined && options.tlsCertFile === undefined) {
    return "tlsClientCaFile needs tlsCertFile and tlsKeyFile";
  }
  if (options.token !== undefined && !options.token.trim()) return "token is empty";
  if (options.port !== undefined && (!Number.isInteger(options.port) || options.port < 0 || options.port > 65535)) {
    return `port must be an integer from 0 to 65535, got ${options.port}`;
  }
  if (options.grace !== undefined && !(options.grace >= 0)) return `grace must be seconds >= 0, got ${options.grace}`;
  if (options.identityKeysFile !== undefined && options.identityKeysFrom !== undefined) {
    return "identityKeysFile and identityKeysFrom are alternatives: give one";
  }
  if (options.identityKeysFrom !== undefined && !options.identityKeysFrom.trim()) {
    return "identityKeysFrom is empty: give the sidecar's gRPC address (host:port or unix:/path)";
  }
  if (options.identityKeysCa !== undefined && options.identityKeysFrom === undefined) {
    return "identityKeysCa needs identityKeysFrom: it verifies the certificate of the sidecar the keys are fetched from";
  }
  for (const keys of ["identityKeysFile", "identityKeysFrom"] as const) {
    if (options[keys] !== undefined && !options.identityAudience) {
      return `${keys} needs identityAudience: this server's name in the sidecar's configuration (tool_servers[].name)`;
    }
  }
  if (options.identityRequired && options.identityKeysFile === undefined && options.identityKeysFrom === undefined) {
    return "identityRequired needs identityKeysFile or identityKeysFrom to verify with";
  }
  if (options.identityLeeway !== undefined && !(options.identityLeeway >= 0 && Number.isFinite(options.identityLeeway))) {
    return `identityLeeway must be seconds >= 0, got ${options.identityLeeway}`;
  }
  return undefined;
}

export const USAGE = `flags:
  --host HOST             interface to listen on (default 127.0.0.1)
  --port PORT             port (default 0: any free port)
  --grace SECONDS         time running calls get after SIGTERM (default 10)
  --tls-cert FILE         serve TLS with this PEM certificate (reread when it changes)
  --tls-key FILE          the PEM private key of --tls-cert
  --tls-client-ca FILE    require callers' certificates to chain to this CA (mutual TLS)
  --token-env NAME        require the bearer token held by this environment variable
  --token-file FILE       require the bearer token held in this file
  --identity-keys FILE    verify each call's identity assertion with the sidecar's public keys
                          (a JWKS from 'agent-sidecar identity jwks', or a PEM public key)
  --identity-keys-from TARGET
                          fetch those keys from a sidecar instead (its gRPC address, host:port
                          or unix:/path); plaintext only to loopback, localhost or unix:, TLS otherwise
  --identity-keys-ca FILE verify the TLS certificate of --identity-keys-from against this CA
                          (default: the system's roots)
  --identity-audience NAME
                          this server's name in the sidecar's configuration (tool_servers[].name)
  --identity-issuer NAME  the issuer the sidecar signs as (default agent-sidecar)
  --require-identity      refuse calls without a verified identity assertion
  --identity-leeway SECONDS
                          clock difference allowed for an assertion's lifetime (default 10)
  --log-level LEVEL       debug, info (default), warn or error`;

/** Parses a tool server's command line. Throws an Error with a usage message on a bad flag. */
export function parseServeArgs(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): ServeOptions {
  const { values } = parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: {
      host: { type: "string" },
      port: { type: "string" },
      grace: { type: "string" },
      "tls-cert": { type: "string" },
      "tls-key": { type: "string" },
      "tls-client-ca": { type: "string" },
      "token-env": { type: "string" },
      "token-file": { type: "string" },
      "log-level": { type: "string" },
      "identity-keys": { type: "string" },
      "identity-keys-from": { type: "string" },
      "identity-keys-ca": { type: "string" },
      "identity-audience": { type: "string" },
      "identity-issuer": { type: "string" },
      "require-identity": { type: "boolean" },
      "identity-leeway": { type: "string" },
    },
  });
  const number = (flag: string, text: string | undefined): number | undefined => {
    if (text === undefined) return undefined;
    const value = Number(text);
    if (text.trim() === "" || !Number.isFinite(value)) throw new Error(`--${flag} ${JSON.stringify(text)} is not a number`);
    return value;
  };
  const level = values["log-level"]?.toLowerCase();
  if (level !== undefined && !(LEVELS as readonly string[]).includes(level)) {
    throw new Error(`--log-level must be one of ${LEVELS.join(", ")}, got ${JSON.stringify(level)}`);
  }
  if (values["token-env"] !== undefined && values["token-file"] !== undefined) {
    throw new Error("--token-env and --token-file are alternatives: give one");
  }
  let token: string | undefined;
  if (values["token-env"] !== undefined) {
    token = (env[values["token-env"]] ?? "").trim();
    if (!token) throw new Error(`--token-env ${values["token-env"]}: the variable is unset or empty`);
  } else if (values["token-file"] !== undefined) {
    try {
      token = readFileSync(values["token-file"], "utf8").trim();
    } catch (error) {
      throw new Error(`--token-file ${values["token-file"]}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
    }
    if (!token) throw new Error(`--token-file ${values["token-file"]}: the file is empty`);
  }
  const options: ServeOptions = {
    host: values.host,
    port: number("port", values.port),
    grace: number("grace", values.grace),
    tlsCertFile: values["tls-cert"],
    tlsKeyFile: values["tls-key"],
    tlsClientCaFile: values["tls-client-ca"],
    token,
    logLevel: level as LogLevel | undefined,
    identityKeysFile: values["identity-keys"],
    identityKeysFrom: values["identity-keys-from"],
    identityKeysCa: values["identity-keys-ca"],
    identityAudience: values["identity-audience"],
    identityIssuer: values["identity-issuer"],
    identityRequired: values["require-identity"],
    identityLeeway: number("identity-leeway", values["identity-leeway"]),
  };
  const problem = optionsProblem(options);
  if (problem) {
    throw new Error(
      problem
        .replace("tlsCertFile", "--tls-cert")
        .replace("tlsKeyFile", "--tls-key")
        .replace("tlsClientCaFile", "--tls-client-ca")
        .replace(/^port/, "--port")
        .replace(/^grace/, "--grace")
        .replaceAll("identityKeysFile", "--identity-keys")
        .replaceAll("identityKeysFrom", "--identity-keys-from")
        .replaceAll("identityKeysCa", "--identity-keys-ca")
        .replace("identityAudience", "--identity-audience")
        .replace("identityRequired", "--require-identity")
        .replace("identityLeeway", "--identity-leeway"),
    );
  }
  return options;
}
