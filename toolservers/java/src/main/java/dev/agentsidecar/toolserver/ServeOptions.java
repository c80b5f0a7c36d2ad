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
 */
public record ServeOptions(
    String host,
    int port,
    Duration grace,
    String tlsCertFile,
    String tlsKeyFile,
    String tlsClientCaFile,
    String token) {

  static final String USAGE = """
      flags:
        --host HOST             interface to listen on (default 127.0.0.1)
        --port PORT             port (default 0: any free port)
        --grace SECONDS         time running calls get after SIGTERM (default 10)
        --tls-cert FILE         serve TLS with this PEM certificate (reread when it changes)
        --tls-key FILE          the PEM private key of --tls-cert
        --tls-client-ca FILE    require callers' certificates to chain to this CA (mutual TLS)
        --token-env NAME        require the bearer token held by this environment variable
        --token-file FILE       require the bearer token held in this file""";

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
  }

  /** The defaults: 127.0.0.1, any free port, 10 s of grace, plaintext, no token. */
  public static ServeOptions defaults() {
    return new ServeOptions(null, 0, null, null, null, null, null);
  }

  public ServeOptions withPort(int port) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token);
  }

  public ServeOptions withGrace(Duration grace) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token);
  }

  public ServeOptions withToken(String token) {
    return new ServeOptions(host, port, grace, tlsCertFile, tlsKeyFile, tlsClientCaFile, token);
  }

  public ServeOptions withTls(String certFile, String keyFile, String clientCaFile) {
    return new ServeOptions(host, port, grace, certFile, keyFile, clientCaFile, token);
  }

  /** Parses a tool server's command line; an IllegalArgumentException says what is wrong. */
  static ServeOptions parse(String[] args, Map<String, String> env) {
    String host = null;
    String cert = null;
    String key = null;
    String ca = null;
    String token = null;
    int port = 0;
    Duration grace = null;
    for (int i = 0; i < args.length; i++) {
      String flag = args[i];
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
      return new ServeOptions(host, port, grace, cert, key, ca, token);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(e.getMessage()
          .replace("tlsCertFile", "--tls-cert").replace("tlsKeyFile", "--tls-key")
          .replace("tlsClientCaFile", "--tls-client-ca"), e);
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
