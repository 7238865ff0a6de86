package ingest.hudi;

import com.amazonaws.ClientConfiguration;
import com.amazonaws.auth.AWSCredentialsProvider;
import com.amazonaws.auth.AWSStaticCredentialsProvider;
import com.amazonaws.auth.BasicAWSCredentials;
import com.amazonaws.auth.BasicSessionCredentials;
import com.amazonaws.auth.DefaultAWSCredentialsProviderChain;
import com.amazonaws.client.builder.AwsClientBuilder;
import com.amazonaws.services.s3.AmazonS3;
import com.amazonaws.services.s3.AmazonS3ClientBuilder;
import com.amazonaws.services.s3.model.AmazonS3Exception;
import com.amazonaws.services.s3.model.ObjectMetadata;
import com.amazonaws.services.s3.model.PutObjectRequest;
import java.io.ByteArrayInputStream;
import java.io.Serializable;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Date;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hudi.common.config.LockConfiguration;
import org.apache.hudi.common.config.TypedProperties;
import org.apache.hudi.common.lock.LockProvider;
import org.apache.hudi.exception.HoodieLockException;
import org.apache.hudi.storage.StorageConfiguration;

/**
 * Hudi's table lock on an S3-compatible store, taken with a conditional PUT ({@code
 * If-None-Match: *}) of {@code <base>/.hoodie/.ingest/lock}: the store creates the object for one
 * writer and answers 412 to the others, which is what Hudi's file-system lock cannot get from
 * S3A (Hudi refuses it there: "can not support atomic creation"), and the primitive the
 * pipeline's own journal relies on.
 *
 * <p>A lock left by a killed process expires {@code hoodie.write.lock.filesystem.expire} minutes
 * after it was taken (as Hudi's file-system lock does; 0: never), judged by the store's own
 * Last-Modified against the local clock. The S3 connection comes from the Hadoop configuration's
 * {@code fs.s3a.*} settings, the ones Hudi's writer itself uses for the table.
 */
public class ConditionalPutLockProvider implements LockProvider<String>, Serializable {
  private static final long serialVersionUID = 1L;
  private static final long POLL_MS = 250;

  private final String bucket;
  private final String key;
  private final long expireMs;
  private final String owner = UUID.randomUUID().toString();
  private final transient AmazonS3 s3;

  public ConditionalPutLockProvider(LockConfiguration lockConfig, StorageConfiguration<?> storage) {
    TypedProperties props = lockConfig.getConfig();
    String base = props.getString("hoodie.base.path", "");
    URI uri = URI.create(base.endsWith("/") ? base : base + "/");
    if (uri.getHost() == null || !uri.getScheme().startsWith("s3")) {
      throw new HoodieLockException("ConditionalPutLockProvider needs an s3:// table: " + base);
    }
    this.bucket = uri.getHost();
    this.key = uri.getPath().replaceAll("^/+", "") + ".hoodie/.ingest/lock";
    // minutes, as Hudi's file-system lock reads it (a fraction allowed)
    this.expireMs = (long) (60_000
        * Double.parseDouble(props.getString(LockConfiguration.FILESYSTEM_LOCK_EXPIRE_PROP_KEY, "0")));
    this.s3 = client(storage.unwrapAs(Configuration.class));
  }

  private static AmazonS3 client(Configuration conf) {
    AmazonS3ClientBuilder builder = AmazonS3ClientBuilder.standard()
        .withPathStyleAccessEnabled(conf.getBoolean("fs.s3a.path.style.access", false))
        .withClientConfiguration(new ClientConfiguration().withMaxErrorRetry(3));
    String endpoint = conf.getTrimmed("fs.s3a.endpoint", "");
    String region = conf.getTrimmed("fs.s3a.endpoint.region", "us-east-1");
    if (!endpoint.isEmpty()) {
      builder.withEndpointConfiguration(new AwsClientBuilder.EndpointConfiguration(endpoint, region));
    } else {
      builder.withRegion(region);
    }
    String access = conf.getTrimmed("fs.s3a.access.key", "");
    String secret = conf.getTrimmed("fs.s3a.secret.key", "");
    String token = conf.getTrimmed("fs.s3a.session.token", "");
    AWSCredentialsProvider credentials = access.isEmpty()
        ? DefaultAWSCredentialsProviderChain.getInstance()
        : new AWSStaticCredentialsProvider(token.isEmpty()
            ? new BasicAWSCredentials(access, secret)
            : new BasicSessionCredentials(access, secret, token));
    return builder.withCredentials(credentials).build();
  }

  /** One conditional PUT: true when this call created the lock object. */
  private boolean create() {
    byte[] body = ("{\"owner\":\"" + owner + "\"}").getBytes(StandardCharsets.UTF_8);
    ObjectMetadata meta = new ObjectMetadata();
    meta.setContentLength(body.length);
    meta.setContentType("application/json");
    PutObjectRequest put = new PutObjectRequest(bucket, key, new ByteArrayInputStream(body), meta);
    put.putCustomRequestHeader("If-None-Match", "*");
    try {
      s3.putObject(put);
      return true;
    } catch (AmazonS3Exception e) {
      if (e.getStatusCode() == 412 || e.getStatusCode() == 409) {
        return false; // held by another writer, or another conditional PUT in flight
      }
      throw new HoodieLockException("lock s3://" + bucket + "/" + key + ": " + e.getMessage(), e);
    }
  }

  /** Deletes a lock older than the expiry (a killed holder's); true when it was one. */
  private boolean expireStale() {
    if (expireMs <= 0) {
      return false;
    }
    try {
      Date taken = s3.getObjectMetadata(bucket, key).getLastModified();
      if (taken != null && System.currentTimeMillis() - taken.getTime() > expireMs) {
        s3.deleteObject(bucket, key);
        return true;
      }
    } catch (AmazonS3Exception e) {
      if (e.getStatusCode() != 404) {
        throw new HoodieLockException("lock s3://" + bucket + "/" + key + ": " + e.getMessage(), e);
      }
    }
    return false;
  }

  @Override
  public boolean tryLock(long time, TimeUnit unit) {
    long deadline = System.currentTimeMillis() + unit.toMillis(time);
    while (true) {
      if (create()) {
        return true;
      }
      if (expireStale()) {
        continue;
      }
      if (System.currentTimeMillis() >= deadline) {
        return false;
      }
      try {
        Thread.sleep(POLL_MS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
  }

  @Override
  public void unlock() {
    try {
      String body = s3.getObjectAsString(bucket, key);
      if (body.contains(owner)) {
        s3.deleteObject(bucket, key);
      }
    } catch (AmazonS3Exception e) {
      if (e.getStatusCode() != 404) {
        throw new HoodieLockException("unlock s3://" + bucket + "/" + key + ": " + e.getMessage(), e);
      }
    }
  }

  @Override
  public String getLock() {
    return "s3://" + bucket + "/" + key;
  }

  @Override
  public String getCurrentOwnerLockInfo() {
    return owner;
  }

  @Override
  public void close() {
    s3.shutdown();
  }
}
