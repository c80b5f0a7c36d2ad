package dev.agentsidecar.toolserver;

import java.time.Duration;
import java.util.Map;

/**
 * How a tool server is served.
 *
 * @param host interface to listen on; default 127.0.0.1 (a sidecar's tools are local unless exposed)
 * @param port port; 0 (the default) picks a free one, announced
 * @param grace how long running calls get after SIGTERM; default 10 s
 * @param tlsCertFile PEM certificate chain to serve TLS with (with {@code tlsKeyFile}); both are
 *     reread when they change (checked every 5 s); null: plaintext
 * @param tlsKeyFile its PEM private key
 * @param tlsClientCaFile PEM CA bundle callers' certificates must chain to (mutual TLS); null: none
 * @param token a bearer token every tool call must carry; null: none. Health and reflection stay open
 * @param identityKeysFile the sidecar's public keys (a JWKS, as {@code agent-sidecar identity
 *     jwks} prints it, or a PEM public key): every call's signed identity assertion is verified
 *     before its tool runs, and a call whose assertion fails ends UNAUTHENTICATED. Reread within a
 *     second of a change. Null (the default): handlers see the plain, unverified identity
 * @param identityKeysFrom the sidecar's gRPC address ({@code HOST:PORT} or {@code unix:/PATH})
 *     to fetch its public keys from ({@code agentsidecar.v1.IdentityKeysService}), instead of
 *     {@code identityKeysFile}: fetched in the background from the start, tried again after 1 s
 *     (doubling to 30 s) when a fetch fails, then again every {@code max_age} and soon after an
 *     assertion names an unknown kid; until the first answer a call carrying an assertion is
 *     refused UNAUTHENTICATED. Plaintext only to this machine (a loopback address, {@code
 *     localhost}, a {@code unix:} socket); any other target is dialled with TLS. Null: none
 * @param identityKeysCa a PEM CA bundle to verify {@code identityKeysFrom}'s TLS certificate with;
 *     given, the target is dialled with TLS even on this machine. Null: the system's roots (for a
 *     target elsewhere)
 * @param identityAudience this server's name in the sidecar's configuration ({@code
 *     tool_servers[].name}); needed with {@code identityKeysFile} or {@code identityKeysFrom}: an
 *     assertion for another server is refused
 * @param identityIssuer the issuer the sidecar signs as ({@code auth.tool_assertion.issuer});
 *     default {@code agent-sidecar}
 * @param identityRequired refuse calls that carry no assertion (UNAUTHENTICATED); false (the
 *     default): they run with the plain identity, {@code verified} false
 * @param identityLeeway how far apart the clocks of the sidecar and this server may be when an
 *     assertion's lifetime is checked; default 10 s
 */
public record ServeOptions(
    String host,
    int port,
    Duration grace,
    String tlsCertFile,
    String tlsKeyFile,
    String tlsClientCaFile,
    String token,
    String identityKeysFile,
    String identityKeysFrom,
    String identityKeysCa,
    String identityAudience,
    String identityIssuer,
    boolean identityRequired,
    Duration identityLeeway) {
  static final String DEFAULT_ISSUER = "agent-sidecar";

  static final String USAGE = """
      flags:
        --host HOST             interface to listen on (default 127.0.0.1)
        --port PORT             port (default 0: any free port)
        --grace SECONDS         time running calls get after SIGTERM (default 10)
        --tls-cert FILE         serve TLS with this PEM certificate (reread when it changes)
        --tls-key FILE          the PEM private key of --tls-cert
        --tls-client-ca FILE    require callers' certificates to chain to this CA (mutual TLS)
        --token-env NAME        require the bearer token held by this environment variable
        --token-file FILE       require the bearer token held in this file
        --identity-keys FILE    verify each call's identity assertion with the sidecar's public
                                keys (a JWKS from 'agent-sidecar identity jwks', or a PEM key)
        --identity-keys-from TARGET  instead, fetch the keys from the sidecar's gRPC address
                                (HOST:PORT or unix:/PATH; TLS unless on this machine)
        --identity-keys-ca FILE  verify the TLS of --identity-keys-from with this PEM CA
        --identity-audience NAME  this server's name in the sidecar's configuration
        --identity-issuer NAME  the issuer the sidecar signs as (default agent-sidecar)
        --require-identity      refuse calls without a verified identity assertion
        --identity-leeway SECONDS  clock difference allowed for an assertion's lifetime (default 10)""";

  public ServeOptions {
    if (host == null || host.isEmpty()) {
      host = "127.0.0.1";
    }
    if (grace == null) {
      grace = Duration.ofSeconds(10);
    }
    if (port < 0 || port > 65535) {
      throw new IllegalArgumentException("port must be from 0 to 65535, got " + port);
    }
    if ((tlsCertFile == null) != (tlsKeyFile == null)) {
      throw new IllegalArgumentException("tlsCertFile and tlsKeyFile go together");
    }
    if (tlsClientCaFile != null && tlsCertFile == null) {
      throw new IllegalArgumentException("tlsClientCaFile needs tlsCertFile and tlsKeyFile");
    }
    if (token != null && token.isBlank()) {
      throw new IllegalArgumentException("token is empty");
    }
    if (identityIssuer == null || identityIssuer.isEmpty()) {
      identityIssuer = DEFAULT_ISSUER;
    }
    if (identityLeeway == null) {
      identityLeeway = Duration.ofSeconds(10);
    }
    if (identityKeysFrom != null && identityKeysFrom.isEmpty()) {
      identityKeysFrom = null;
    }
    if (identityKeysFile != null && identityKeysFrom != null) {
      throw new IllegalArgumentException("identityKeysFile and identityKeysFrom exclude each other: the keys come "
          + "from a file or from a sidecar");
    }
    if (identityKeysCa != null && identityKeysFrom == null) {
      throw new IllegalArgumentException("identityKeysCa needs identityKeysFrom");
    }
    if (identityKeysFrom != null) {
      IdentityKeysFetcher.isLocal(identityKeysFrom); // the target's form
    }
    String keysFrom = identityKeysFile != null ? "identityKeysFile" : "identityKeysFrom";
    if ((identityKeysFile != null || identityKeysFrom != null) && (identityAudience == null || identityAudience.isEmpty())) {
      throw new IllegalArgumentException(keysFrom + " needs identityAudience: this server's name in the "
          + "sidecar's configuration (tool_servers[].name)");
    }
    if (identityRequired && identityKeysFile == null && identityKeysFrom == null) {
      throw new IllegalArgumentException("identityRequired needs identityKeysFile or identityKeysFrom to verify with");
    }
    if (identityLeeway.isNegative()) {
      throw new IllegalArgumentException("identityLeeway is negative");
    }
  }

  /** The options with the identity keys from a file only, as before they could be fetched. */
  public ServeOptions(String host, int port, Duration grace, String tlsCertFile, String tlsKeyFile,
      String tlsClientCaFile, String token, String identityKeysFile, String identityAudience, String identityIssuer,
      boolean identityRequired, Duration identityLeeway) {
    this(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token, identityKeysFile, null, null,
        identityAudience, identityIssuer, identityRequired, identityLeeway);
  }

  /** The options without identity verification, as before it existed. */
  public ServeOptions(String host, int port, Duration grace, String tlsCertFile, String tlsKeyFile,
      String tlsClientCaFile, String token) {
    this(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token, null, null, null, null, null, false, null);
  }

  /** The defaults: 127.0.0.1, any free port, 10 s of grace, plaintext, no token, no identity verification. */
  public static ServeOptions defaults() {
    return new ServeOptions(null, 0, null, null, null, null, null);
  }

  public ServeOptions withPort(int port) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        identityKeysFile, identityKeysFrom, identityKeysCa, identityAudience, identityIssuer, identityRequired, identityLeeway);
  }

  public ServeOptions withGrace(Duration grace) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        identityKeysFile, identityKeysFrom, identityKeysCa, identityAudience, identityIssuer, identityRequired, identityLeeway);
  }

  public ServeOptions withToken(String token) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        identityKeysFile, identityKeysFrom, identityKeysCa, identityAudience, identityIssuer, identityRequired, identityLeeway);
  }

  public ServeOptions withTls(String certFile, String keyFile, String clientCaFile) {
    return new ServeOptions(host, port, grace, certFile, keyFile, clientCaFile, token,
        identityKeysFile, identityKeysFrom, identityKeysCa, identityAudience, identityIssuer, identityRequired, identityLeeway);
  }

  /**
   * Verifies every call's identity assertion with the sidecar's public keys in {@code keysFile},
   * for this server, named {@code audience} in the sidecar's configuration; {@code required}
   * refuses calls without one. Replaces keys fetched from a sidecar ({@link #withIdentityFrom}).
   */
  public ServeOptions withIdentity(String keysFile, String audience, boolean required) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        keysFile, null, null, audience, identityIssuer, required, identityLeeway);
  }

  /**
   * Verifies every call's identity assertion with the public keys fetched from the sidecar at
   * {@code target} ({@code HOST:PORT} or {@code unix:/PATH}, its gRPC address), for this server,
   * named {@code audience} in the sidecar's configuration; {@code required} refuses calls without
   * one. Replaces a keys file ({@link #withIdentity}).
   */
  public ServeOptions withIdentityFrom(String target, String audience, boolean required) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        null, target, identityKeysCa, audience, identityIssuer, required, identityLeeway);
  }

  /** The PEM CA bundle to verify the TLS of {@link #identityKeysFrom()} with (TLS then also on this machine). */
  public ServeOptions withIdentityKeysCa(String caFile) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        identityKeysFile, identityKeysFrom, caFile, identityAudience, identityIssuer, identityRequired, identityLeeway);
  }

  /** The issuer the sidecar signs as, when it is not {@code agent-sidecar}. */
  public ServeOptions withIdentityIssuer(String issuer) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        identityKeysFile, identityKeysFrom, identityKeysCa, identityAudience, issuer, identityRequired, identityLeeway);
  }

  /** How far apart the clocks of the sidecar and this server may be (default 10 s). */
  public ServeOptions withIdentityLeeway(Duration leeway) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token,
        identityKeysFile, identityKeysFrom, identityKeysCa, identityAudience, identityIssuer, identityRequired, leeway);
  }

  /** Parses a tool server's command line; an IllegalArgumentException says what is wrong. */
  static ServeOptions parse(String[] args, Map<String, String> env) {
    String host = null;
    String cert = null;
    String key = null;
    String ca = null;
    String token = null;
    String keys = null;
    String keysFrom = null;
    String keysCa = null;
    String audience = null;
    String issuer = null;
    boolean required = false;
    Duration leeway = null;
    int port = 0;
    Duration grace = null;
    for (int i = 0; i < args.length; i++) {
      String flag = args[i];
      if (flag.equals("--require-identity")) { // the one flag without a value
        required = true;
        continue;
      }
      if (i + 1 >= args.length) {
        throw new IllegalArgumentException(flag + " needs a value");
      }
      String value = args[++i];
      switch (flag) {
        case "--host" -> host = value;
        case "--port" -> port = number(flag, value).intValue();
        case "--grace" -> grace = Duration.ofMillis(Math.round(number(flag, value) * 1000));
        case "--tls-cert" -> cert = value;
        case "--tls-key" -> key = value;
        case "--tls-client-ca" -> ca = value;
        case "--identity-keys" -> keys = value;
        case "--identity-keys-from" -> keysFrom = value;
        case "--identity-keys-ca" -> keysCa = value;
        case "--identity-audience" -> audience = value;
        case "--identity-issuer" -> issuer = value;
        case "--identity-leeway" -> leeway = Duration.ofMillis(Math.round(number(flag, value) * 1000));
        case "--token-env" -> {
          token = env.getOrDefault(value, "").strip();
          if (token.isEmpty()) {
            throw new IllegalArgumentException("--token-env " + value + ": the variable is unset or empty");
          }
        }
        case "--token-file" -> {
          token = ToolServer.readToken(value);
          if (token.isEmpty()) {
            throw new IllegalArgumentException("--token-file " + value + ": the file is empty");
          }
        }
        default -> throw new IllegalArgumentException("unknown flag " + flag);
      }
    }
    try {
      return new ServeOptions(host, port, grace, cert, key, ca, token, keys, keysFrom, keysCa, audience, issuer, required, leeway);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(e.getMessage()
          .replace("tlsCertFile", "--tls-cert").replace("tlsKeyFile", "--tls-key")
          .replace("tlsClientCaFile", "--tls-client-ca")
          .replace("identityKeysFile", "--identity-keys").replace("identityKeysFrom", "--identity-keys-from")
          .replace("identityKeysCa", "--identity-keys-ca").replace("identityAudience", "--identity-audience")
          .replace("identityRequired", "--require-identity").replace("identityLeeway", "--identity-leeway"), e);
    }
  }

  private static Double number(String flag, String value) {
    try {
      return Double.valueOf(value);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(flag + " \"" + value + "\" is not a number", e);
    }
  }
}
