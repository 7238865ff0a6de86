/*
 * An Iceberg REST catalog server for the lab's tests and drills (lab/rest_catalog/server.py
 * starts it): Iceberg's own RESTCatalogServlet over RESTCatalogAdapter (iceberg-core's test
 * fixtures) over a JdbcCatalog (PostgreSQL), served by Jetty on a loopback port, behind a gate
 * of our own that adds what a production catalog has and the fixture lacks:
 *
 *   - OAuth2 client credentials: POST /v1/oauth/tokens issues bearer tokens (kept in memory:
 *     a restart forgets them); every other request needs one that is not expired, else 401.
 *     The real lifetime and the advertised expires_in are set apart, so a token can die on the
 *     server while its client still trusts it.
 *   - fault hooks on commit requests (POST .../namespaces/{ns}/tables/{t} and
 *     POST .../transactions/commit), armed by a file whose content names the fault; read on
 *     every commit request, deleted when the fault fires, so a restart does not fire it again.
 *   - one log line per request on stdout: method, path, status.
 *
 * Usage: java -cp <set>/*:<compiled> RestCatalogServer <config.properties>
 * Keys: server.host, server.port, auth.client-id, auth.client-secret,
 * auth.token-lifetime-seconds, auth.advertised-expires-in, auth.static-token (optional),
 * faults.file, catalog.name, catalog.<key> (JdbcCatalog properties, prefix stripped).
 */

import jakarta.servlet.ServletException;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

public class RestCatalogServer {

  /** What an armed fault file can name; its text is the fault's name. */
  enum Fault {
    HALT_BEFORE_APPLY("halt-before-apply"),
    HALT_AFTER_APPLY("halt-after-apply"),
    HALT_AFTER_ANSWER("halt-after-answer"),
    ANSWER_502_AFTER_APPLY("answer-502-after-apply"),
    HANG_AFTER_APPLY("hang-after-apply"),
    EXPIRE_TOKENS("expire-tokens");

    final String label;

    Fault(String label) {
      this.label = label;
    }

    static Fault parse(String text) {
      for (Fault f : values()) {
        if (f.label.equals(text)) {
          return f;
        }
      }
      return null;
    }
  }

  static final String TOKEN_PATH = "/v1/oauth/tokens";
  // a table commit or a multi-table transaction, with or without a catalog prefix
  static final Pattern COMMIT_PATH =
      Pattern.compile("^/v1/(?:[^/]+/)?(?:namespaces/[^/]+/tables/[^/]+|transactions/commit)$");
  static final int HALT_STATUS = 137;
  static final long HANG_MILLIS = 120_000L;

  static void say(String line) {
    System.out.println(line);
    System.out.flush();
  }

  /** Issued bearer tokens and when the server stops honouring them. */
  static final class Tokens {
    private final Map<String, Long> expiry = new ConcurrentHashMap<>();
    private final SecureRandom random = new SecureRandom();
    private final long lifetimeMillis;
    private final String staticToken;

    Tokens(long lifetimeMillis, String staticToken) {
      this.lifetimeMillis = lifetimeMillis;
      this.staticToken = staticToken;
    }

    String issue() {
      byte[] raw = new byte[24];
      random.nextBytes(raw);
      String token = HexFormat.of().formatHex(raw);
      expiry.put(token, System.currentTimeMillis() + lifetimeMillis);
      return token;
    }

    boolean valid(String token) {
      if (token == null) {
        return false;
      }
      if (staticToken != null && !staticToken.isEmpty() && staticToken.equals(token)) {
        return true;
      }
      Long until = expiry.get(token);
      if (until == null) {
        return false;
      }
      if (until < System.currentTimeMillis()) {
        expiry.remove(token);
        return false;
      }
      return true;
    }

    void forgetAll() {
      expiry.clear();
    }
  }

  /** A response whose body is held back until the gate decides what to answer. */
  static final class HeldResponse extends HttpServletResponseWrapper {
    final ByteArrayOutputStream body = new ByteArrayOutputStream();
    private PrintWriter writer;
    private ServletOutputStream stream;

    HeldResponse(HttpServletResponse response) {
      super(response);
    }

    @Override
    public ServletOutputStream getOutputStream() {
      if (stream == null) {
        stream =
            new ServletOutputStream() {
              @Override
              public boolean isReady() {
                return true;
              }

              @Override
              public void setWriteListener(WriteListener listener) {}

              @Override
              public void write(int b) {
                body.write(b);
              }

              @Override
              public void write(byte[] b, int off, int len) {
                body.write(b, off, len);
              }
            };
      }
      return stream;
    }

    @Override
    public PrintWriter getWriter() {
      if (writer == null) {
        writer = new PrintWriter(new OutputStreamWriter(body, StandardCharsets.UTF_8));
      }
      return writer;
    }

    @Override
    public void flushBuffer() {}

    @Override
    public boolean isCommitted() {
      return false;
    }

    byte[] bytes() {
      if (writer != null) {
        writer.flush();
      }
      return body.toByteArray();
    }

    /**
     * The status to answer. Iceberg's servlet writes an error's own status and body (a 409
     * CommitFailedException, a 404 NoSuchTableException), then its adapter throws "Unhandled
     * error" and the servlet overwrites that status with 500: a REST catalog answers the
     * error's own code, and clients decide on it (409: refused; 5xx: unknown outcome).
     */
    int errorStatus() {
      int status = getStatus();
      if (status != 500) {
        return status;
      }
      java.util.regex.Matcher code =
          ERROR_CODE.matcher(new String(bytes(), StandardCharsets.UTF_8));
      return code.find() ? Integer.parseInt(code.group(1)) : status;
    }
  }

  static final Pattern ERROR_CODE =
      Pattern.compile("\\A\\s*\\{\\s*\"error\"\\s*:\\s*\\{.*?\"code\"\\s*:\\s*(\\d{3})", Pattern.DOTALL);

  /** Auth, fault hooks and the request log in front of Iceberg's servlet. */
  static final class Gate extends HttpServlet {
    private final RESTCatalogServlet catalog;
    private final Tokens tokens;
    private final String clientId;
    private final String clientSecret;
    private final long advertisedExpiresIn;
    private final Path faultFile;

    Gate(
        RESTCatalogServlet catalog,
        Tokens tokens,
        String clientId,
        String clientSecret,
        long advertisedExpiresIn,
        Path faultFile) {
      this.catalog = catalog;
      this.tokens = tokens;
      this.clientId = clientId;
      this.clientSecret = clientSecret;
      this.advertisedExpiresIn = advertisedExpiresIn;
      this.faultFile = faultFile;
    }

    @Override
    public void init() throws ServletException {
      catalog.init(getServletConfig());
    }

    @Override
    protected void service(HttpServletRequest req, HttpServletResponse resp)
        throws ServletException, IOException {
      String method = req.getMethod();
      String path = req.getRequestURI();
      int status = handle(method, path, req, resp);
      say(method + " " + path + " " + status);
    }

    private int handle(String method, String path, HttpServletRequest req, HttpServletResponse resp)
        throws ServletException, IOException {
      if ("POST".equals(method) && TOKEN_PATH.equals(path)) {
        return tokenEndpoint(req, resp);
      }
      boolean commit = "POST".equals(method) && COMMIT_PATH.matcher(path).matches();
      Fault fault = commit ? armedFault() : null;
      if (fault == Fault.EXPIRE_TOKENS) {
        disarm(fault);
        tokens.forgetAll();
      }
      if (!tokens.valid(bearer(req))) {
        return icebergError(resp, 401, "NotAuthorizedException", "Not authorized: no valid bearer token");
      }
      if (fault == null || fault == Fault.EXPIRE_TOKENS) {
        HeldResponse held = new HeldResponse(resp);
        catalog.service((jakarta.servlet.ServletRequest) req, (jakarta.servlet.ServletResponse) held);
        int status = held.errorStatus();
        resp.setStatus(status);
        answer(resp, held);
        return status;
      }
      disarm(fault);
      if (fault == Fault.HALT_BEFORE_APPLY) {
        halt(fault, method, path);
      }
      HeldResponse held = new HeldResponse(resp);
      catalog.service((jakarta.servlet.ServletRequest) req, (jakarta.servlet.ServletResponse) held);
      int applied = held.errorStatus();
      resp.setStatus(applied);
      switch (fault) {
        case HALT_AFTER_APPLY:
          halt(fault, method, path);
          return applied;
        case ANSWER_502_AFTER_APPLY:
          resp.reset();
          return icebergError(
              resp, 502, "BadGatewayException", "fault answer-502-after-apply (catalog answered " + applied + ")");
        case HANG_AFTER_APPLY:
          say("FAULT " + fault.label + " " + method + " " + path + " sleeping " + HANG_MILLIS + " ms");
          sleep(HANG_MILLIS);
          answer(resp, held);
          return applied;
        case HALT_AFTER_ANSWER:
          answer(resp, held);
          resp.flushBuffer();
          say(method + " " + path + " " + applied);
          sleep(200); // the answer leaves the socket before the process does
          halt(fault, method, path);
          return applied;
        default:
          throw new IllegalStateException("unhandled fault " + fault);
      }
    }

    private static void answer(HttpServletResponse resp, HeldResponse held) throws IOException {
      byte[] bytes = held.bytes();
      resp.setContentLength(bytes.length);
      resp.getOutputStream().write(bytes);
    }

    private static void halt(Fault fault, String method, String path) {
      say("FAULT " + fault.label + " " + method + " " + path + " halting");
      Runtime.getRuntime().halt(HALT_STATUS);
    }

    private static void sleep(long millis) {
      try {
        Thread.sleep(millis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }

    private Fault armedFault() {
      if (faultFile == null) {
        return null;
      }
      String text;
      try {
        text = Files.readString(faultFile, StandardCharsets.UTF_8).trim();
      } catch (NoSuchFileException e) {
        return null;
      } catch (IOException e) {
        say("FAULT file unreadable " + faultFile + ": " + e);
        return null;
      }
      Fault fault = Fault.parse(text);
      if (fault == null) {
        say("FAULT unknown fault '" + text + "' in " + faultFile + ": ignored and removed");
        deleteFaultFile();
      }
      return fault;
    }

    private void disarm(Fault fault) {
      say("FAULT " + fault.label + " fired");
      deleteFaultFile();
    }

    private void deleteFaultFile() {
      try {
        Files.deleteIfExists(faultFile);
      } catch (IOException e) {
        say("FAULT could not remove " + faultFile + ": " + e);
      }
    }

    private static String bearer(HttpServletRequest req) {
      String header = req.getHeader("Authorization");
      if (header == null || !header.regionMatches(true, 0, "Bearer ", 0, 7)) {
        return null;
      }
      return header.substring(7).trim();
    }

    /** OAuth2 client credentials (RFC 6749 4.4) and token exchange of a live token. */
    private int tokenEndpoint(HttpServletRequest req, HttpServletResponse resp) throws IOException {
      String grant = req.getParameter("grant_type");
      String id = req.getParameter("client_id");
      String secret = req.getParameter("client_secret");
      String basic = req.getHeader("Authorization");
      if (basic != null && basic.regionMatches(true, 0, "Basic ", 0, 6)) {
        String pair =
            new String(Base64.getDecoder().decode(basic.substring(6).trim()), StandardCharsets.UTF_8);
        int colon = pair.indexOf(':');
        if (colon >= 0) {
          id = pair.substring(0, colon);
          secret = pair.substring(colon + 1);
        }
      }
      boolean granted;
      if ("client_credentials".equals(grant)) {
        granted = clientId.equals(id) && clientSecret.equals(secret);
      } else if ("urn:ietf:params:oauth:grant-type:token-exchange".equals(grant)) {
        // the Java client's refresh: a token still live buys a new one
        granted = tokens.valid(req.getParameter("subject_token")) || tokens.valid(bearer(req));
      } else {
        return oauthError(resp, 400, "unsupported_grant_type", "grant_type " + grant + " is not supported");
      }
      if (!granted) {
        return oauthError(resp, 401, "invalid_client", "unknown client or wrong secret");
      }
      Map<String, Object> body = new HashMap<>();
      body.put("access_token", tokens.issue());
      body.put("token_type", "bearer");
      body.put("expires_in", advertisedExpiresIn);
      body.put("issued_token_type", "urn:ietf:params:oauth:token-type:access_token");
      return json(resp, 200, body);
    }

    private static int oauthError(HttpServletResponse resp, int status, String error, String text)
        throws IOException {
      Map<String, Object> body = new HashMap<>();
      body.put("error", error);
      body.put("error_description", text);
      return json(resp, status, body);
    }

    private static int icebergError(HttpServletResponse resp, int status, String type, String message)
        throws IOException {
      Map<String, Object> error = new HashMap<>();
      error.put("message", message);
      error.put("type", type);
      error.put("code", status);
      return json(resp, status, Map.of("error", error));
    }

    private static int json(HttpServletResponse resp, int status, Map<String, Object> body)
        throws IOException {
      byte[] bytes =
          org.apache.iceberg.util.JsonUtil.mapper()
              .writeValueAsString(body)
              .getBytes(StandardCharsets.UTF_8);
      resp.setStatus(status);
      resp.setContentType("application/json");
      resp.setContentLength(bytes.length);
      resp.getOutputStream().write(bytes);
      return status;
    }
  }

  static String required(Properties config, String key) {
    String value = config.getProperty(key);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("missing configuration key " + key);
    }
    return value;
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: RestCatalogServer <config.properties>");
      System.exit(2);
    }
    Properties config = new Properties();
    try (InputStream in = Files.newInputStream(Path.of(args[0]))) {
      config.load(in);
    }
    Map<String, String> catalogProps = new HashMap<>();
    for (String key : config.stringPropertyNames()) {
      if (key.startsWith("catalog.") && !key.equals("catalog.name")) {
        catalogProps.put(key.substring("catalog.".length()), config.getProperty(key));
      }
    }
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.initialize(config.getProperty("catalog.name", "lab"), catalogProps);

    Tokens tokens =
        new Tokens(
            Long.parseLong(config.getProperty("auth.token-lifetime-seconds", "3600")) * 1000L,
            config.getProperty("auth.static-token"));
    String faults = config.getProperty("faults.file");
    Gate gate =
        new Gate(
            new RESTCatalogServlet(new RESTCatalogAdapter(catalog)),
            tokens,
            required(config, "auth.client-id"),
            required(config, "auth.client-secret"),
            Long.parseLong(config.getProperty("auth.advertised-expires-in", "3600")),
            faults == null || faults.isEmpty() ? null : Path.of(faults));

    String host = config.getProperty("server.host", "127.0.0.1");
    int port = Integer.parseInt(required(config, "server.port"));
    Server server = new Server(new InetSocketAddress(host, port));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.setContextPath("/");
    context.addServlet(new ServletHolder(gate), "/*");
    server.setHandler(context);
    server.start();
    say("READY http://" + host + ":" + port);
    server.join();
  }
}
