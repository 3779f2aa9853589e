// The data loader (data/loader.hpp), over real conversation records with synthetic JPEG/PNG images:
//   * the batches equal a serial reference (build each sample in order, push through a Packer) and are
//     byte-identical for 1, 2 and 4 workers;
//   * corrupt samples (truncated JPEG, bad JSON, a placeholder without an image, an over-budget sample) are
//     skipped and counted with their keys; the run ends cleanly;
//   * resume: take K batches, save, restore into a new loader (other worker count too), the rest is identical,
//     for many K, over an in-memory source and over a shuffled SampleStream of tar shards;
//   * the wait time in next() is measured; a failing source's error is returned (and again); destruction never
//     hangs (full queue, blocked workers, never started); a state from another packing config is rejected;
//   * throughput (samples/s with 1 and 2 workers on synthetic 640x480 JPEGs), printed.
// Run: ./build/cpu/tests/test_loader
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "vlpar/data/image_encode.hpp"
#include "vlpar/data/loader.hpp"
#include "vlpar/data/webdataset_writer.hpp"

namespace vlpar::data {
namespace {

const std::string kTokenizer = std::string(VLPAR_FIXTURES_DIR) + "/tokenizer/tokenizer.json";

std::vector<uint8_t> bytes_of(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::shared_ptr<const ConversationBuilder> builder() {
  static const std::shared_ptr<const ConversationBuilder> b = [] {
    auto tok = Tokenizer::from_file(kTokenizer);
    EXPECT_TRUE(tok.ok()) << tok.status().message();
    ConversationOptions o;
    o.image.min_pixels = 1024;       // small images → few tokens, fast tests
    o.image.max_pixels = 128 * 128;
    auto r = ConversationBuilder::create(std::make_shared<const Tokenizer>(std::move(tok).value()), o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::make_shared<const ConversationBuilder>(std::move(r).value());
  }();
  return b;
}

Image pattern(int64_t w, int64_t h, uint64_t seed) {
  Image im = Image::zeros(w, h);
  std::mt19937_64 rng(seed);
  const int a = int(rng() % 7) + 1, b = int(rng() % 5) + 1, c = int(rng() % 256);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int ch = 0; ch < 3; ++ch)
        im.rgb[static_cast<size_t>((y * w + x) * 3 + ch)] = static_cast<uint8_t>((a * x + b * y + c + 40 * ch) & 255);
  return im;
}

// n samples: mostly one image (JPEG or PNG, varied sizes), some with two, some text-only; sample `bad` indices
// get a defect (cycling through truncated JPEG, bad JSON, missing image, huge text).
std::vector<Sample> make_samples(int n, std::vector<int> bad = {}, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.key = fmt::format("s{:04}", i);
    s.shard = fmt::format("shard-{}.tar", i / 50);
    s.index_in_shard = i % 50;
    const int kind = int(rng() % 10);
    const int n_img = kind == 0 ? 0 : (kind == 1 ? 2 : 1);
    std::string q = fmt::format("Question {} about", i);
    for (int w = 0; w < int(rng() % 30); ++w) q += " word";
    std::string a = fmt::format("Answer {}", rng() % 1000);
    std::string user;
    for (int k = 0; k < n_img; ++k) user += "<image>";
    user += q;
    std::string record = fmt::format(R"({{"conversations":[{{"from":"human","value":"{}"}},{{"from":"gpt","value":"{}"}}]}})",
                                     user, a);
    const int defect_kind = int(std::find(bad.begin(), bad.end(), i) - bad.begin());
    const bool defect = defect_kind < int(bad.size());
    if (defect && defect_kind % 4 == 1) record = "{\"conversations\": [oops";
    if (defect && defect_kind % 4 == 3) {
      std::string big;
      for (int w = 0; w < 3000; ++w) big += " long";
      record = fmt::format(R"({{"conversations":[{{"from":"human","value":"{}"}},{{"from":"gpt","value":"x"}}]}})",
                           big);
    }
    s.fields.push_back({"json", bytes_of(record)});
    for (int k = 0; k < n_img; ++k) {
      if (defect && defect_kind % 4 == 2) break;  // placeholder without its image
      const int64_t w = 24 + int64_t(rng() % 200), h = 24 + int64_t(rng() % 160);
      std::vector<uint8_t> enc = (rng() % 2 == 0) ? encode_jpeg(pattern(w, h, rng())).value()
                                                  : encode_png(pattern(w, h, rng())).value();
      if (defect && defect_kind % 4 == 0) enc.resize(enc.size() / 3);
      s.fields.push_back({n_img == 1 ? "jpg" : fmt::format("{}.jpg", k), std::move(enc)});
    }
    out.push_back(std::move(s));
  }
  return out;
}

LoaderConfig loader_config(int64_t workers, int64_t max_tokens = 512) {
  LoaderConfig c;
  c.num_workers = workers;
  c.prefetch = 3;
  c.packing.max_tokens = max_tokens;
  c.packing.lookahead = 8;
  return c;
}

std::unique_ptr<Loader> make_loader(std::shared_ptr<const std::vector<Sample>> samples, const LoaderConfig& c,
                                    int64_t epochs = 1) {
  auto l = Loader::create(std::make_unique<VectorSampleSource>(std::move(samples), epochs), builder(), c);
  EXPECT_TRUE(l.ok()) << l.status().message();
  return std::move(l).value();
}

std::vector<PackedBatch> drain(Loader& l, int64_t max_batches = 1 << 30) {
  std::vector<PackedBatch> out;
  for (int64_t k = 0; k < max_batches; ++k) {
    auto b = l.next();
    EXPECT_TRUE(b.ok()) << b.status().message();
    if (!b.ok() || !b.value().has_value()) break;
    out.push_back(std::move(*b.value()));
  }
  return out;
}

::testing::AssertionResult same_batches(const std::vector<PackedBatch>& a, const std::vector<PackedBatch>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " batches";
  for (size_t i = 0; i < a.size(); ++i) {
    const bool eq = a[i].input_ids == b[i].input_ids && a[i].labels == b[i].labels &&
                    a[i].cu_seqlens == b[i].cu_seqlens && a[i].positions == b[i].positions &&
                    a[i].pixel_values == b[i].pixel_values && a[i].pixel_values_videos == b[i].pixel_values_videos &&
                    a[i].sample_keys == b[i].sample_keys && a[i].images_per_sample == b[i].images_per_sample &&
                    a[i].fingerprint() == b[i].fingerprint();
    if (!eq) return ::testing::AssertionFailure() << "batch " << i << " differs";
  }
  return ::testing::AssertionSuccess();
}

TEST(Loader, EqualsSerialReferenceAndIdenticalForAnyWorkerCount) {
  const auto samples = std::make_shared<const std::vector<Sample>>(make_samples(90));
  // Serial reference: build in order, pack.
  std::vector<PackedBatch> ref;
  {
    const LoaderConfig c = loader_config(1);
    Packer p = Packer::create(c.packing, builder()->mrope_desc()).value();
    for (const Sample& s : *samples) {
      auto t = builder()->build(s);
      ASSERT_TRUE(t.ok()) << t.status().message();
      ASSERT_TRUE(p.push(std::move(t).value()).ok());
      while (p.ready()) ref.push_back(p.pop().value());
    }
    while (!p.empty()) ref.push_back(p.pop().value());
  }
  ASSERT_GT(ref.size(), 5u);
  int64_t images = 0;
  for (const PackedBatch& b : ref) images += b.num_images;
  EXPECT_GT(images, 50);
  for (int64_t workers : {1, 2, 4}) {
    SCOPED_TRACE(workers);
    auto l = make_loader(samples, loader_config(workers));
    const std::vector<PackedBatch> got = drain(*l);
    EXPECT_TRUE(same_batches(got, ref));
    const LoaderStats st = l->stats();
    EXPECT_EQ(st.samples_read, 90);
    EXPECT_EQ(st.samples_packed, 90);
    EXPECT_EQ(st.batches, static_cast<int64_t>(ref.size()));
    EXPECT_EQ(st.skipped_invalid + st.skipped_oversize, 0);
    EXPECT_GT(st.efficiency(), 0.5);
  }
}

TEST(Loader, SkipsCorruptSamplesWithTheirKeys) {
  const std::vector<int> bad = {3, 10, 11, 40, 41, 42, 43, 77};
  const auto samples = std::make_shared<const std::vector<Sample>>(make_samples(80, bad, 2));
  // Which defect each bad index gets: its position in `bad` mod 4 (0 truncated image: 3, 41; 1 bad JSON: 10, 42;
  // 2 placeholder without its image: 11, 43; 3 over the token budget: 40, 77). A text-only sample has no image
  // to break, so only the JSON and budget defects are certain.
  std::vector<PackedBatch> first;
  for (int64_t workers : {1, 4}) {
    auto l = make_loader(samples, loader_config(workers));
    const std::vector<PackedBatch> got = drain(*l);
    if (first.empty()) first = got;
    EXPECT_TRUE(same_batches(got, first));
    const LoaderStats st = l->stats();
    EXPECT_EQ(st.samples_read, 80);
    EXPECT_EQ(st.skipped_oversize, 2);  // bad[3] = 40 and bad[7] = 77
    EXPECT_GE(st.skipped_invalid, 2);   // the bad JSON ones always; the image defects when the sample has an image
    EXPECT_EQ(st.samples_packed + st.skipped_invalid + st.skipped_oversize, 80);
    std::set<std::string> keys_packed;
    for (const PackedBatch& b : got) keys_packed.insert(b.sample_keys.begin(), b.sample_keys.end());
    for (const std::string k : {"s0010", "s0042", "s0040", "s0077"}) {
      EXPECT_EQ(keys_packed.count(k), 0u) << k;
      bool listed = false;
      for (const std::string& line : st.skipped) listed = listed || line.rfind(k + ":", 0) == 0;
      EXPECT_TRUE(listed) << k << " not in the skip list";
      EXPECT_NE(l->summary().find(k), std::string::npos);
    }
    EXPECT_NE(l->summary().find("skipped as invalid"), std::string::npos);
    // A skip line names the record's place once and the sample once: "s0010: the record is not valid JSON ...
    // [shard 'shard-0.tar', record 10]".
    const auto json_line = std::find_if(st.skipped.begin(), st.skipped.end(),
                                        [](const std::string& line) { return line.rfind("s0010:", 0) == 0; });
    ASSERT_NE(json_line, st.skipped.end());
    EXPECT_NE(json_line->find("not valid JSON"), std::string::npos) << *json_line;
    EXPECT_NE(json_line->find("[shard 'shard-0.tar', record 10]"), std::string::npos) << *json_line;
    EXPECT_EQ(json_line->find("sample 's0010'"), std::string::npos) << *json_line;
  }
}

TEST(Loader, ResumeContinuesWithTheExactNextBatch) {
  const auto samples = std::make_shared<const std::vector<Sample>>(make_samples(70, {5, 33}, 3));
  const LoaderConfig c = loader_config(2, 384);
  auto full_loader = make_loader(samples, c, /*epochs=*/2);
  const std::vector<PackedBatch> full = drain(*full_loader);
  ASSERT_GT(full.size(), 12u);
  const LoaderStats full_stats = full_loader->stats();
  for (size_t k : {size_t(0), size_t(1), size_t(4), size_t(7), full.size() / 2, full.size() - 1, full.size()}) {
    SCOPED_TRACE(k);
    auto a = make_loader(samples, loader_config(4, 384), 2);
    const std::vector<PackedBatch> head = drain(*a, static_cast<int64_t>(k));
    ASSERT_EQ(head.size(), k);
    const std::string state = a->save_state();
    a.reset();  // destroy with a full queue and busy workers
    auto b = make_loader(samples, loader_config(1 + int64_t(k % 3), 384), 2);
    ASSERT_TRUE(b->restore(state).ok());
    std::vector<PackedBatch> joined = head;
    for (PackedBatch& x : drain(*b)) joined.push_back(std::move(x));
    EXPECT_TRUE(same_batches(joined, full));
    const LoaderStats st = b->stats();
    EXPECT_EQ(st.samples_read, full_stats.samples_read);
    EXPECT_EQ(st.skipped_invalid, full_stats.skipped_invalid);
    EXPECT_EQ(st.batches, full_stats.batches);
    EXPECT_EQ(st.real_tokens, full_stats.real_tokens);
  }
  // Restoring the same loader in place, mid-run, also continues exactly.
  auto l = make_loader(samples, c, 2);
  const std::vector<PackedBatch> h1 = drain(*l, 5);
  const std::string s5 = l->save_state();
  drain(*l, 3);
  ASSERT_TRUE(l->restore(s5).ok());
  std::vector<PackedBatch> joined = h1;
  for (PackedBatch& x : drain(*l)) joined.push_back(std::move(x));
  EXPECT_TRUE(same_batches(joined, full));
}

TEST(Loader, RejectsAStateFromAnotherPackingConfig) {
  const auto samples = std::make_shared<const std::vector<Sample>>(make_samples(20));
  auto a = make_loader(samples, loader_config(1, 512));
  drain(*a, 2);
  auto b = make_loader(samples, loader_config(1, 256));
  const Status st = b->restore(a->save_state());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("packing.max_tokens"), std::string::npos) << st.message();
  EXPECT_FALSE(b->restore("{}").ok());
  EXPECT_FALSE(b->restore("not json").ok());
  // b still works after the failed restores.
  EXPECT_FALSE(drain(*b).empty());

  // A state the source rejects (position past the end) after the pipeline was stopped mid-run: the loader
  // continues exactly where it was (stopping loses no read sample and no finished batch).
  LoaderConfig c = loader_config(3, 256);
  c.prefetch = 1;
  auto full_loader = make_loader(samples, c);
  const std::vector<PackedBatch> full = drain(*full_loader);
  auto l = make_loader(samples, c);
  std::vector<PackedBatch> got = drain(*l, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the packer now blocks on the full queue
  std::string bad = l->save_state();
  const size_t at = bad.find("\"source\":\"");
  ASSERT_NE(at, std::string::npos) << bad;
  bad.replace(at, bad.find('"', at + 10) - at + 1, "\"source\":\"999999\"");
  const Status rs = l->restore(bad);
  ASSERT_FALSE(rs.ok()) << bad;
  EXPECT_NE(rs.message().find("past the end"), std::string::npos) << rs.message();
  for (PackedBatch& x : drain(*l)) got.push_back(std::move(x));
  EXPECT_TRUE(same_batches(got, full));
}

TEST(Loader, ResumeOverAShuffledSampleStream) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("vlpar_test_loader_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::vector<Sample> samples = make_samples(60, {7}, 4);
  ShardWriterOptions wo;
  wo.pattern = "shard-%03d.tar";
  wo.max_count = 17;
  wo.tar.fsync = false;
  auto w = ShardWriter::open(dir.string(), wo);
  ASSERT_TRUE(w.ok()) << w.status().message();
  for (const Sample& s : samples) {
    WdsSample ws;
    ws.key = s.key;
    for (const SampleField& f : s.fields) ws.members.push_back({f.ext, f.data});
    ASSERT_TRUE(w.value().write(ws).ok());
  }
  ASSERT_TRUE(w.value().finish().ok());
  std::vector<std::string> paths;
  for (const ShardInfo& si : w.value().shards()) paths.push_back((dir / si.name).string());
  auto shards = index_webdataset_shards(paths);
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  SampleStreamConfig sc;
  sc.seed = 9;
  sc.shuffle_buffer = 10;
  sc.num_epochs = 2;
  auto make = [&](int64_t workers) {
    auto st = SampleStream::create(shards.value(), {}, sc);
    EXPECT_TRUE(st.ok()) << st.status().message();
    auto l = Loader::create(std::make_unique<StreamSampleSource>(std::move(st).value()), builder(),
                            loader_config(workers, 384));
    EXPECT_TRUE(l.ok()) << l.status().message();
    return std::move(l).value();
  };
  auto full_loader = make(3);
  const std::vector<PackedBatch> full = drain(*full_loader);
  ASSERT_GT(full.size(), 10u);
  EXPECT_EQ(full_loader->stats().samples_read, 120);
  for (size_t k : {size_t(2), size_t(9), full.size() - 2}) {
    auto a = make(2);
    const std::vector<PackedBatch> head = drain(*a, static_cast<int64_t>(k));
    const std::string state = a->save_state();
    a.reset();
    auto b = make(1);
    ASSERT_TRUE(b->restore(state).ok());
    std::vector<PackedBatch> joined = head;
    for (PackedBatch& x : drain(*b)) joined.push_back(std::move(x));
    EXPECT_TRUE(same_batches(joined, full)) << "resumed after " << k;
  }
  std::filesystem::remove_all(dir);
}

// A source that sleeps before each sample and may fail at a given position.
class SlowSource final : public SampleSource {
 public:
  SlowSource(std::vector<Sample> s, int sleep_ms, int fail_at = -1)
      : samples_(std::move(s)), sleep_ms_(sleep_ms), fail_at_(fail_at) {}
  Result<std::optional<Sample>> next() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (pos_ == fail_at_) return VLPAR_STATUS(StatusCode::kIoError, "shard gone at sample {}", pos_);
    if (pos_ >= static_cast<int>(samples_.size())) return std::optional<Sample>();
    return std::optional<Sample>(samples_[static_cast<size_t>(pos_++)]);
  }
  std::string save_state() const override { return std::to_string(pos_); }
  Status restore(std::string_view s) override {
    pos_ = std::stoi(std::string(s));
    return Status::Ok();
  }

 private:
  std::vector<Sample> samples_;
  int sleep_ms_;
  int fail_at_;
  int pos_ = 0;
};

TEST(Loader, MeasuresWaitAndReportsSourceErrors) {
  auto l = Loader::create(std::make_unique<SlowSource>(make_samples(30), 15, 25), builder(), loader_config(2));
  ASSERT_TRUE(l.ok());
  Loader& loader = *l.value();
  Status err;
  int batches = 0;
  for (int k = 0; k < 100; ++k) {
    auto b = loader.next();
    if (!b.ok()) {
      err = b.status();
      break;
    }
    ASSERT_TRUE(b.value().has_value()) << "the source fails before its end";
    ++batches;
  }
  EXPECT_FALSE(err.ok());
  EXPECT_NE(err.message().find("shard gone at sample 25"), std::string::npos) << err.message();
  auto again = loader.next();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(), err.message());
  // 25 samples at 15 ms each through a single reader take >= 0.37 s; the consumer waited for most of it.
  const LoaderStats st = loader.stats();
  EXPECT_GT(st.wait_s, 0.2);
  EXPECT_GT(st.last_wait_s, 0.0);
  EXPECT_GE(batches, 1);
}

TEST(Loader, DestructionNeverHangs) {
  const auto samples = std::make_shared<const std::vector<Sample>>(make_samples(40));
  {  // never started
    auto l = make_loader(samples, loader_config(4));
  }
  {  // full prefetch queue, workers blocked on the window
    LoaderConfig c = loader_config(4);
    c.prefetch = 1;
    auto l = make_loader(samples, c, /*epochs=*/0);
    ASSERT_TRUE(l->next().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  {  // a slow source mid-read
    auto l = Loader::create(std::make_unique<SlowSource>(make_samples(10), 50), builder(), loader_config(3));
    ASSERT_TRUE(l.ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  SUCCEED();
}

TEST(Loader, EndlessDataThatNeverBuildsIsAnErrorNotASpin) {
  // Every sample is defective (truncated image, malformed record, missing image, over the budget), repeated
  // endlessly: after max_skips_in_a_row consecutive skips next() fails with a message naming the last one.
  std::vector<int> all(12);
  for (int i = 0; i < 12; ++i) all[size_t(i)] = i;
  LoaderConfig c = loader_config(2);
  c.max_skips_in_a_row = 50;
  auto l = make_loader(std::make_shared<const std::vector<Sample>>(make_samples(12, all)), c, /*epochs=*/0);
  Result<std::optional<PackedBatch>> b = l->next();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("50 samples in a row were skipped"), std::string::npos) << b.status().message();
  EXPECT_FALSE(l->next().ok());  // the error stays
}

TEST(Loader, ConfigErrors) {
  LoaderConfig c = loader_config(0);
  EXPECT_FALSE(c.validate().ok());
  c = loader_config(4);
  c.reorder_window = 2;
  EXPECT_FALSE(c.validate().ok());
  c = loader_config(1);
  c.prefetch = 0;
  EXPECT_FALSE(c.validate().ok());
  EXPECT_FALSE(Loader::create(nullptr, builder(), loader_config(1)).ok());
}

// Throughput on synthetic photos: 640x480 JPEGs (quality 90) with the Qwen3-VL processor defaults (no resize at
// 640x480: multiples of 32; 1200 patches = 300 image tokens), budget 4096 tokens.
TEST(Loader, ThroughputOnSyntheticJpegs) {
  std::vector<Sample> samples;
  std::mt19937_64 rng(8);
  const int n = 48;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.key = fmt::format("p{:03}", i);
    s.fields.push_back({"json", bytes_of(R"({"conversations":[{"from":"human","value":"<image>\nWhat is shown?"},
                                            {"from":"gpt","value":"A synthetic pattern."}]})")});
    s.fields.push_back({"jpg", encode_jpeg(pattern(640, 480, rng())).value()});
    samples.push_back(std::move(s));
  }
  auto tok = Tokenizer::from_file(kTokenizer);
  ASSERT_TRUE(tok.ok());
  auto b = ConversationBuilder::create(std::make_shared<const Tokenizer>(std::move(tok).value()), {});
  ASSERT_TRUE(b.ok());
  const auto shared_builder = std::make_shared<const ConversationBuilder>(std::move(b).value());
  const auto shared = std::make_shared<const std::vector<Sample>>(std::move(samples));
  // Serial stage breakdown (one thread): decode, decode + process, the whole build (adds tokenize + copies).
  {
    using C = std::chrono::steady_clock;
    double t_dec = 0, t_proc = 0, t_build = 0;
    for (const Sample& s : *shared) {
      auto t0 = C::now();
      Image im = decode_image(s.field("jpg")->data, s.key).value();
      auto t1 = C::now();
      ProcessedImage p = process_image(im, shared_builder->options().image).value();
      auto t2 = C::now();
      TokenizedSample t = shared_builder->build(s).value();
      auto t3 = C::now();
      t_dec += std::chrono::duration<double>(t1 - t0).count();
      t_proc += std::chrono::duration<double>(t2 - t1).count();
      t_build += std::chrono::duration<double>(t3 - t2).count();
      EXPECT_EQ(t.pixel_values.size(), p.pixel_values.size());
    }
    // Packing (one thread), twice over the same built samples: the first pass pays for fresh pages (the pack
    // buffers are ~100 MB), the second shows the steady state.
    std::vector<TokenizedSample> built;
    for (const Sample& s : *shared) built.push_back(shared_builder->build(s).value());
    double t_pack[2] = {0, 0};
    for (int pass = 0; pass < 2; ++pass) {
      Packer pk = Packer::create(loader_config(1, 4096).packing, shared_builder->mrope_desc()).value();
      for (const TokenizedSample& t : built) {
        ASSERT_TRUE(pk.push(t).ok());
        auto t0 = C::now();
        while (pk.ready()) ASSERT_TRUE(pk.pop().ok());
        t_pack[pass] += std::chrono::duration<double>(C::now() - t0).count();
      }
      auto t0 = C::now();
      while (!pk.empty()) ASSERT_TRUE(pk.pop().ok());
      t_pack[pass] += std::chrono::duration<double>(C::now() - t0).count();
    }
    std::printf("[loader] per sample, one thread: decode %.2f ms, process %.2f ms, whole build %.2f ms; packing "
                "%.2f ms (first pass %.2f ms)\n", 1e3 * t_dec / n, 1e3 * t_proc / n, 1e3 * t_build / n,
                1e3 * t_pack[1] / n, 1e3 * t_pack[0] / n);
  }
  // Whole loader: 2 epochs of the 48 samples per run, batches dropped as they come; the machine is shared, so
  // each worker count runs 3 times (interleaved) and the best and median rates are printed.
  std::map<int64_t, std::vector<double>> rates;
  for (int rep = 0; rep < 3; ++rep) {
    for (int64_t workers : {1, 2}) {
      LoaderConfig c = loader_config(workers, 4096);
      c.packing.lookahead = 16;
      auto l = Loader::create(std::make_unique<VectorSampleSource>(shared, 2), shared_builder, c);
      ASSERT_TRUE(l.ok());
      const auto t0 = std::chrono::steady_clock::now();
      int64_t batches = 0;
      while (true) {
        auto b = l.value()->next();
        ASSERT_TRUE(b.ok()) << b.status().message();
        if (!b.value().has_value()) break;
        ++batches;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_EQ(l.value()->stats().samples_packed, 2 * n);
      EXPECT_GT(batches, 0);
      rates[workers].push_back(double(2 * n) / s);
      if (rep == 0)
        std::printf("[loader] %lld worker(s): packing efficiency %.1f%%, consumer wait %.3f s of %.3f s\n",
                    static_cast<long long>(workers), 100.0 * l.value()->stats().efficiency(),
                    l.value()->stats().wait_s, s);
    }
  }
  for (auto& [workers, r] : rates) {
    std::sort(r.begin(), r.end());
    std::printf("[loader] %lld worker(s): %d samples (640x480 JPEG) per run: best %.0f samples/s, median %.0f\n",
                static_cast<long long>(workers), 2 * n, r.back(), r[r.size() / 2]);
  }
}

}  // namespace
}  // namespace vlpar::data
