package ingest.hudi;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.generic.GenericRecord;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hudi.HoodieSchemaConversionUtils;
import org.apache.hudi.HoodieSparkUtils;
import org.apache.hudi.client.SparkRDDWriteClient;
import org.apache.hudi.client.WriteStatus;
import org.apache.hudi.client.common.HoodieSparkEngineContext;
import org.apache.hudi.common.config.TypedProperties;
import org.apache.hudi.common.model.HoodieAvroIndexedRecord;
import org.apache.hudi.common.model.HoodieKey;
import org.apache.hudi.common.model.HoodieRecord;
import org.apache.hudi.common.model.HoodieTableType;
import org.apache.hudi.common.model.HoodieTimelineTimeZone;
import org.apache.hudi.common.model.HoodieWriteStat;
import org.apache.hudi.common.model.WriteOperationType;
import org.apache.hudi.common.table.HoodieTableMetaClient;
import org.apache.hudi.common.table.timeline.HoodieInstant;
import org.apache.hudi.common.table.timeline.HoodieTimeline;
import org.apache.hudi.common.util.JsonUtils;
import org.apache.hudi.common.util.Option;
import org.apache.hudi.common.util.collection.Pair;
import org.apache.hudi.config.HoodieWriteConfig;
import org.apache.hudi.keygen.BaseKeyGenerator;
import org.apache.hudi.keygen.factory.HoodieSparkKeyGeneratorFactory;
import org.apache.hudi.storage.hadoop.HadoopStorageConfiguration;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * Hudi's Spark write client in the pipeline's two phases (called from Python through py4j).
 *
 * <ul>
 *   <li>{@link #begin}: the instant, named by the pipeline, REQUESTED on Hudi's timeline (the
 *       table created first when missing).
 *   <li>{@link #write}: the batch's rows written as data files on the executors (insert or bulk
 *       insert); the instant is left INFLIGHT. Returns the write statistics as JSON, which the
 *       pipeline records in its journal (the precommit), and the conflict baseline.
 *   <li>{@link #commit}: completes the instant from recorded statistics with {@code
 *       commitStats}, the pipeline's checkpoint in the extra metadata. Works in another process
 *       than the write (recovery recommits without recomputing).
 *   <li>{@link #rollback}: Hudi's own rollback of a pending instant (its files deleted).
 * </ul>
 *
 * <p>Failed writes are cleaned lazily (the options the pipeline passes), so opening a client
 * never rolls back a pending instant that recovery may still commit. Each call opens its own
 * client and closes it; a client's heartbeat for the instant is started where Hudi checks it.
 */
public final class TwoPhaseWriter {

  private static final String RECORD_NAME = "record";
  private static final String HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning";
  private static final String URL_ENCODE = "hoodie.datasource.write.partitionpath.urlencode";
  private static final ObjectMapper JSON = JsonUtils.getObjectMapper();

  private TwoPhaseWriter() {}

  /** What {@link #write} returns: one JSON document per written file, and the baseline. */
  public static final class Written {
    private final List<String> stats;
    private final String baseline;
    private final String schema;

    Written(List<String> stats, String baseline, String schema) {
      this.stats = stats;
      this.baseline = baseline;
      this.schema = schema;
    }

    public List<String> stats() {
      return stats;
    }

    public String baseline() {
      return baseline;
    }

    public String schema() {
      return schema;
    }
  }

  /**
   * A write client that can carry its optimistic-concurrency baseline (the last completed
   * instant and the instants pending when the write began) from the writing process to the
   * committing one: a fresh client would take every completed commit for a concurrent one.
   */
  static final class Client<T> extends SparkRDDWriteClient<T> {
    Client(HoodieSparkEngineContext context, HoodieWriteConfig config) {
      super(context, config);
    }

    String baseline() throws Exception {
      Map<String, Object> doc = new HashMap<>();
      if (lastCompletedTxnAndMetadata.isPresent()) {
        HoodieInstant last = lastCompletedTxnAndMetadata.get().getLeft();
        doc.put("lastCompleted", last.requestedTime());
        doc.put("lastCompletedAction", last.getAction());
      }
      doc.put("pending", new ArrayList<>(pendingInflightAndRequestedInstants));
      return JSON.writeValueAsString(doc);
    }

    @SuppressWarnings("unchecked")
    void restore(HoodieTableMetaClient meta, String baseline, String instant) throws Exception {
      if (baseline == null || baseline.isEmpty()) {
        return;
      }
      Map<String, Object> doc = JSON.readValue(baseline, Map.class);
      String last = (String) doc.get("lastCompleted");
      if (last != null) {
        HoodieTimeline done = meta.getActiveTimeline().getCommitsTimeline().filterCompletedInstants();
        java.util.Optional<HoodieInstant> found =
            done.getInstants().stream().filter(i -> i.requestedTime().equals(last)).findFirst();
        HoodieInstant at =
            found.orElseGet(
                () ->
                    meta.createNewInstant(
                        HoodieInstant.State.COMPLETED, (String) doc.get("lastCompletedAction"), last));
        Map<String, String> extra =
            found.isPresent() ? done.readCommitMetadata(at).getExtraMetadata() : new HashMap<>();
        lastCompletedTxnAndMetadata = Option.of(Pair.of(at, extra));
      }
      java.util.Set<String> pending = new HashSet<>((List<String>) doc.get("pending"));
      pending.remove(instant);
      pendingInflightAndRequestedInstants = pending;
    }
  }

  private static HoodieWriteConfig config(String basePath, Map<String, String> options, String schema) {
    HoodieWriteConfig.Builder builder =
        HoodieWriteConfig.newBuilder()
            .withPath(basePath)
            .forTable(options.get("hoodie.table.name"))
            .withProps(new HashMap<>(options));
    if (schema != null) {
      builder.withSchema(schema);
    }
    return builder.build();
  }

  private static Client<?> client(SparkSession spark, String basePath, Map<String, String> options, String schema) {
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    return new Client<>(new HoodieSparkEngineContext(jsc), config(basePath, options, schema));
  }

  private static HoodieTableMetaClient meta(SparkSession spark, String basePath) {
    return HoodieTableMetaClient.builder()
        .setConf(new HadoopStorageConfiguration(spark.sparkContext().hadoopConfiguration()))
        .setBasePath(basePath)
        .build();
  }

  /** Creates the copy-on-write table when {@code basePath} holds none; true when it did. */
  public static boolean ensureTable(SparkSession spark, String basePath, Map<String, String> options)
      throws Exception {
    Path properties = new Path(basePath, ".hoodie/hoodie.properties");
    FileSystem fs = properties.getFileSystem(spark.sparkContext().hadoopConfiguration());
    if (fs.exists(properties)) {
      return false;
    }
    HoodieTableMetaClient.newTableBuilder()
        .setTableType(HoodieTableType.COPY_ON_WRITE)
        .setTableName(options.get("hoodie.table.name"))
        .setRecordKeyFields(options.get("hoodie.datasource.write.recordkey.field"))
        .setPartitionFields(options.getOrDefault("hoodie.datasource.write.partitionpath.field", ""))
        .setKeyGeneratorClassProp(options.get("hoodie.datasource.write.keygenerator.class"))
        .setPopulateMetaFields(true)
        .setHiveStylePartitioningEnable(Boolean.parseBoolean(options.get(HIVE_STYLE)))
        .setUrlEncodePartitioning(Boolean.parseBoolean(options.get(URL_ENCODE)))
        // the pipeline names instants in UTC: Hudi's own (rollback, clean) must sort with them
        .setCommitTimezone(HoodieTimelineTimeZone.UTC)
        .initTable(new HadoopStorageConfiguration(spark.sparkContext().hadoopConfiguration()), basePath);
    return true;
  }

  /** The instant REQUESTED on the table's timeline (the table created when missing). */
  public static void begin(SparkSession spark, String basePath, Map<String, String> options, String instant)
      throws Exception {
    ensureTable(spark, basePath, options);
    HoodieTableMetaClient meta = meta(spark, basePath);
    String action = meta.getCommitActionType();
    meta.getActiveTimeline()
        .createNewInstant(meta.createNewInstant(HoodieInstant.State.REQUESTED, action, instant));
  }

  /** Hudi's writer schema (Avro JSON) for rows of {@code df}'s schema. */
  public static String schemaOf(Dataset<Row> df, String tableName) {
    return HoodieSchemaConversionUtils.convertStructTypeToHoodieSchema(
            df.schema(), RECORD_NAME, "hoodie." + tableName)
        .toString();
  }

  /**
   * Writes {@code df}'s rows into data files of {@code instant} ("insert" or "bulk_insert")
   * without completing it; fails when a record could not be written.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  public static Written write(
      SparkSession spark,
      Dataset<Row> df,
      String basePath,
      Map<String, String> options,
      String instant,
      String operation)
      throws Exception {
    String table = options.get("hoodie.table.name");
    String schema = schemaOf(df, table);
    Client client = client(spark, basePath, options, schema);
    client.getHeartbeatClient().start(instant); // failed writes are cleaned lazily
    try {
      Properties keyProperties = new Properties();
      keyProperties.putAll(client.getConfig().getProps());
      JavaRDD<GenericRecord> rows = HoodieSparkUtils.createRdd(df, RECORD_NAME, "hoodie." + table).toJavaRDD();
      JavaRDD<HoodieRecord> records =
          rows.mapPartitions(
              (Iterator<GenericRecord> it) -> {
                BaseKeyGenerator keys =
                    (BaseKeyGenerator)
                        HoodieSparkKeyGeneratorFactory.createKeyGenerator(TypedProperties.copy(keyProperties));
                List<HoodieRecord> out = new ArrayList<>();
                while (it.hasNext()) {
                  GenericRecord r = it.next();
                  out.add(new HoodieAvroIndexedRecord(new HoodieKey(keys.getRecordKey(r), keys.getPartitionPath(r)), r));
                }
                return out.iterator();
              });
      JavaRDD<WriteStatus> statuses;
      if ("bulk_insert".equals(operation)) {
        statuses = client.bulkInsert(records, instant);
      } else if ("insert".equals(operation)) {
        statuses = client.insert(records, instant);
      } else {
        throw new IllegalArgumentException("operation must be insert or bulk_insert, not " + operation);
      }
      List<String> stats = new ArrayList<>();
      long failed = 0;
      for (WriteStatus status : statuses.collect()) {
        if (status.isMetadataTable()) {
          continue;
        }
        failed += status.getTotalErrorRecords();
        stats.add(JSON.writeValueAsString(status.getStat()));
      }
      if (failed > 0) {
        throw new IllegalStateException(failed + " records of instant " + instant + " could not be written");
      }
      return new Written(stats, ((Client<?>) client).baseline(), schema);
    } finally {
      client.close();
    }
  }

  /**
   * Completes {@code instant} from recorded write statistics with {@code extraMetadata} (the
   * pipeline's checkpoint); the baseline is {@link Written#baseline} of its write. An instant
   * only requested (a batch that wrote no rows into this table) is made inflight first: Hudi
   * completes inflight instants only.
   */
  public static boolean commit(
      SparkSession spark,
      String basePath,
      Map<String, String> options,
      String instant,
      List<String> stats,
      String schema,
      Map<String, String> extraMetadata,
      String baseline)
      throws Exception {
    List<HoodieWriteStat> written = new ArrayList<>();
    for (String doc : stats) {
      written.add(JSON.readValue(doc, HoodieWriteStat.class));
    }
    HoodieTableMetaClient meta = meta(spark, basePath);
    boolean requestedOnly =
        meta.getActiveTimeline().filterPendingExcludingCompaction().getInstantsAsStream()
            .anyMatch(i -> i.requestedTime().equals(instant) && i.isRequested());
    if (requestedOnly) {
      meta.getActiveTimeline().transitionRequestedToInflight(meta.getCommitActionType(), instant);
      meta = meta(spark, basePath);
    }
    Client<?> client = client(spark, basePath, options, schema);
    try {
      client.setOperationType(WriteOperationType.INSERT);
      client.getHeartbeatClient().start(instant); // Hudi refuses an instant whose heartbeat expired
      client.restore(meta, baseline, instant);
      return client.commitStats(
          instant, written, Option.of(new HashMap<>(extraMetadata)), meta.getCommitActionType());
    } finally {
      client.close();
    }
  }

  /** Hudi's rollback of the pending {@code instant}: its files deleted, a rollback instant. */
  public static boolean rollback(SparkSession spark, String basePath, Map<String, String> options, String instant) {
    SparkRDDWriteClient<?> client = client(spark, basePath, options, null);
    try {
      return client.rollback(instant);
    } finally {
      client.close();
    }
  }

  /** The table's instants as "time action state" lines (state of Hudi's timeline, for tests). */
  public static List<String> timeline(SparkSession spark, String basePath) {
    List<String> out = new ArrayList<>();
    meta(spark, basePath)
        .getActiveTimeline()
        .getInstants()
        .forEach(i -> out.add(i.requestedTime() + " " + i.getAction() + " " + i.getState()));
    return out;
  }
}
