// TensorBoard event files: CRC-32C, TFRecord framing, hand-encoded Event protos, TensorBoardWriter.
// The golden file tests/fixtures/obs/torch_scalars.tfevents was written by torch.utils.tensorboard.SummaryWriter
// (tools/golden/check_tensorboard.py make-fixture); vlpar must parse it and write byte-identical records.
// With VLPAR_OBS_TB_OUT=<dir>, WriterFileReadsBack also leaves its file and an expect.json there, for
//   .venv/bin/python tools/golden/check_tensorboard.py read <dir> --expect <dir>/expect.json
// Run: ./build/<dir>/tests/test_obs_tensorboard
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vlpar/obs/crc32c.hpp"
#include "vlpar/obs/event_proto.hpp"
#include "vlpar/obs/tensorboard_writer.hpp"
#include "vlpar/obs/tfrecord.hpp"

namespace fs = std::filesystem;
using namespace vlpar::obs;
using vlpar::Status;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("vlpar_obs_tb_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string fixture(const std::string& name) { return std::string(VLPAR_FIXTURES_DIR) + "/obs/" + name; }

struct FixtureScalar {
  std::string tag;
  int64_t step;
  float value;
  double wall_time;
};

std::vector<FixtureScalar> fixture_scalars() {
  const nlohmann::json j = nlohmann::json::parse(read_bytes(fixture("torch_scalars.json")));
  std::vector<FixtureScalar> out;
  for (const auto& e : j["scalars"]) {
    double v = 0;
    if (e["value"].is_string()) {
      const std::string s = e["value"].get<std::string>();
      v = s == "inf" ? INFINITY : s == "-inf" ? -INFINITY : NAN;
    } else {
      v = e["value"].get<double>();
    }
    out.push_back({e["tag"].get<std::string>(), e["step"].get<int64_t>(), static_cast<float>(v),
                   e["wall_time"].get<double>()});
  }
  return out;
}

std::string hex(std::string_view s) {
  std::string out;
  for (const char c : s) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

}  // namespace

TEST(Crc32c, KnownVectors) {
  // Check value of the CRC catalogue and the iSCSI test vectors of RFC 3720 appendix B.4.
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string_view("")), 0u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string inc(32, '\0'), dec(32, '\0');
  for (int i = 0; i < 32; ++i) inc[static_cast<size_t>(i)] = static_cast<char>(i);
  for (int i = 0; i < 32; ++i) dec[static_cast<size_t>(i)] = static_cast<char>(31 - i);
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec), 0x113FDB5Cu);
}

TEST(Crc32c, ExtendEqualsWhole) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= s.size(); cut += 7)
    EXPECT_EQ(crc32c_extend(crc32c(s.data(), cut), s.data() + cut, s.size() - cut), crc32c(s)) << cut;
}

TEST(Crc32c, MaskRoundTripsAndMatchesFormula) {
  EXPECT_EQ(crc32c_mask(0u), 0xA282EAD8u);
  // rotate right by 15 then add the delta: 0x00008000 >> 15 = 1.
  EXPECT_EQ(crc32c_mask(0x00008000u), 1u + 0xA282EAD8u);
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u}) EXPECT_EQ(crc32c_unmask(crc32c_mask(c)), c);
}

TEST(TfRecord, FrameLayout) {
  const std::string rec = frame_tfrecord("abc");
  ASSERT_EQ(rec.size(), 3u + 16u);
  EXPECT_EQ(hex(rec.substr(0, 8)), "0300000000000000");  // u64 LE length
  const uint32_t len_crc = static_cast<uint8_t>(rec[8]) | static_cast<uint8_t>(rec[9]) << 8 |
                           static_cast<uint8_t>(rec[10]) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(rec[11])) << 24;
  EXPECT_EQ(len_crc, crc32c_mask(crc32c(rec.data(), 8)));
  EXPECT_EQ(rec.substr(12, 3), "abc");
  const uint32_t data_crc = static_cast<uint8_t>(rec[15]) | static_cast<uint8_t>(rec[16]) << 8 |
                            static_cast<uint8_t>(rec[17]) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(rec[18])) << 24;
  EXPECT_EQ(data_crc, crc32c_mask(crc32c(std::string_view("abc"))));
}

TEST(TfRecord, DetectsCorruptionAndTruncation) {
  const std::string two = frame_tfrecord("first") + frame_tfrecord("second record");
  auto ok = parse_tfrecords(two);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_EQ(ok->records.size(), 2u);
  EXPECT_EQ(ok->records[1], "second record");
  EXPECT_FALSE(ok->truncated_tail);

  std::string bad_data = two;
  bad_data[frame_tfrecord("first").size() + 12 + 3] ^= 0x01;  // a bit inside the second record's data
  auto r1 = parse_tfrecords(bad_data);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("TFRecord 1 at byte 21: data CRC mismatch"), std::string::npos)
      << r1.status().message();

  std::string bad_len = two;
  bad_len[8] ^= 0x10;  // the first record's length CRC
  auto r2 = parse_tfrecords(bad_len);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("TFRecord 0 at byte 0: length CRC mismatch"), std::string::npos)
      << r2.status().message();

  for (size_t cut : {two.size() - 1, two.size() - 5, frame_tfrecord("first").size() + 3}) {
    auto r = parse_tfrecords(std::string_view(two).substr(0, cut));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->truncated_tail) << cut;
    EXPECT_EQ(r->records.size(), 1u) << cut;
  }
}

TEST(EventProto, WireBytes) {
  // Hand-checked against the proto definitions: Event.wall_time = field 1 fixed64 (key 0x09), step = field 2
  // varint (0x10), summary = field 5 bytes (0x2A); Summary.value = field 1 (0x0A); Value.tag = 1 (0x0A),
  // simple_value = 2 fixed32 (0x15).
  const TbScalar s{"a", 1.0f};
  const std::string ev = encode_scalar_event(2.0, 3, std::span<const TbScalar>(&s, 1));
  EXPECT_EQ(hex(ev), "09" "0000000000000040"   // wall_time 2.0
                     "1003"                   // step 3
                     "2a0a" "0a08" "0a0161" "150000803f");  // summary(10 B){value(8 B){tag "a", simple_value 1.0f}}
  // Defaults are omitted (proto3): no wall_time, no step, but the oneof summary and simple_value 0 stay.
  const TbScalar z{"a", 0.0f};
  EXPECT_EQ(hex(encode_scalar_event(0.0, 0, std::span<const TbScalar>(&z, 1))), "2a0a" "0a08" "0a0161" "1500000000");
  // Negative steps are 10-byte varints.
  EXPECT_EQ(hex(encode_scalar_event(0.0, -1, {})), "10ffffffffffffffffff01" "2a00");
  EXPECT_EQ(hex(encode_file_version_event(0.0)), "1a0d" + hex("brain.Event:2"));
  EXPECT_EQ(hex(encode_session_start_event(0.0, 5)), "1005" "3a020801");
}

TEST(EventProto, DecodeRoundTripAndErrors) {
  const std::vector<TbScalar> in = {{"train/loss", 2.5f}, {"train/lr", 3e-4f}, {"x", -0.0f}};
  const std::string ev = encode_scalar_event(1700000000.5, 1234567, in);
  auto d = decode_event(ev);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->wall_time, 1700000000.5);
  EXPECT_EQ(d->step, 1234567);
  ASSERT_EQ(d->scalars.size(), 3u);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(d->scalars[i].tag, in[i].tag);
    EXPECT_EQ(std::bit_cast<uint32_t>(d->scalars[i].value), std::bit_cast<uint32_t>(in[i].value));
  }
  auto fv = decode_event(encode_file_version_event(3.0, "me"));
  ASSERT_TRUE(fv.ok());
  EXPECT_EQ(fv->file_version.value_or(""), "brain.Event:2");
  EXPECT_EQ(fv->source_writer, "me");
  auto ss = decode_event(encode_session_start_event(3.0, 9));
  ASSERT_TRUE(ss.ok());
  EXPECT_EQ(ss->session_status.value_or(-1), 1);
  EXPECT_EQ(ss->step, 9);

  // Cutting between top-level fields leaves a valid (shorter) Event; any cut inside a field must be an error.
  const size_t summary_at = 9 + 4;  // wall_time (1 + 8 bytes), step (1 + 3 bytes: 1234567 < 2^21)
  ASSERT_EQ(static_cast<unsigned char>(ev[summary_at]), 0x2Au);
  for (size_t cut = 1; cut < ev.size(); ++cut) {
    auto t = decode_event(std::string_view(ev).substr(0, cut));
    if (cut == 9 || cut == summary_at) EXPECT_TRUE(t.ok()) << cut;
    else EXPECT_FALSE(t.ok()) << "a truncation at byte " << cut << " decoded";
  }
  auto wrong_type = decode_event(std::string("\x11\x00\x00\x00\x00\x00\x00\x00\x00", 9));  // step as fixed64
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("Event.step"), std::string::npos) << wrong_type.status().message();
}

TEST(TorchFixture, ParsesEveryRecord) {
  auto recs = read_tfrecord_file(fixture("torch_scalars.tfevents"));
  ASSERT_TRUE(recs.ok()) << recs.status().to_string();
  EXPECT_FALSE(recs->truncated_tail);
  const std::vector<FixtureScalar> want = fixture_scalars();
  ASSERT_EQ(recs->records.size(), want.size() + 1);
  auto first = decode_event(recs->records[0]);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->file_version.value_or(""), "brain.Event:2");
  EXPECT_GT(first->wall_time, 1.6e9);
  for (size_t i = 0; i < want.size(); ++i) {
    auto ev = decode_event(recs->records[i + 1]);
    ASSERT_TRUE(ev.ok()) << ev.status().to_string();
    EXPECT_EQ(ev->step, want[i].step) << i;
    EXPECT_EQ(ev->wall_time, want[i].wall_time) << i;
    ASSERT_EQ(ev->scalars.size(), 1u) << i;
    EXPECT_EQ(ev->scalars[0].tag, want[i].tag) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(ev->scalars[0].value), std::bit_cast<uint32_t>(want[i].value)) << i;
  }
}

TEST(TorchFixture, VlparWritesIdenticalRecords) {
  const std::string file = read_bytes(fixture("torch_scalars.tfevents"));
  auto recs = parse_tfrecords(file);
  ASSERT_TRUE(recs.ok());
  const std::vector<FixtureScalar> want = fixture_scalars();
  ASSERT_EQ(recs->records.size(), want.size() + 1);
  // Header: same wall time and writer name give the same bytes, framing included.
  auto first = decode_event(recs->records[0]);
  ASSERT_TRUE(first.ok());
  std::string ours = frame_tfrecord(encode_file_version_event(first->wall_time, first->source_writer));
  size_t pos = 0;
  EXPECT_EQ(hex(ours), hex(std::string_view(file).substr(pos, ours.size())));
  pos += ours.size();
  for (size_t i = 0; i < want.size(); ++i) {
    const TbScalar s{want[i].tag, want[i].value};
    ours = frame_tfrecord(encode_scalar_event(want[i].wall_time, want[i].step, std::span<const TbScalar>(&s, 1)));
    EXPECT_EQ(hex(ours), hex(std::string_view(file).substr(pos, ours.size()))) << "record " << i + 1;
    pos += ours.size();
  }
  EXPECT_EQ(pos, file.size());
}

TEST(TensorBoardWriter, WriterFileReadsBack) {
  TempDir tmp;
  const char* keep = std::getenv("VLPAR_OBS_TB_OUT");
  const std::string dir = keep != nullptr ? std::string(keep) : tmp.str() + "/tb";
  if (keep != nullptr) fs::remove_all(dir);
  TensorBoardWriter::Options opt;
  opt.filename_suffix = ".rank0";
  auto w = TensorBoardWriter::create(dir, opt);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const std::string name = fs::path(w->path()).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_EQ(name.substr(name.size() - 6), ".rank0") << name;

  nlohmann::json expect = nlohmann::json::array();
  for (int64_t step = 1; step <= 20; ++step) {
    MetricsLine m;
    m.step = step;
    m.loss = 5.0 / static_cast<double>(step);
    m.lr = 1e-3 * static_cast<double>(step) / 20.0;
    m.tokens_per_s = 1000.0 + static_cast<double>(step);
    m.wall_time = 1700000000.0 + static_cast<double>(step);
    ASSERT_TRUE(w->add_metrics(m).ok());
    expect.push_back({{"tag", "train/loss"}, {"step", step}, {"value", *m.loss}});
    expect.push_back({{"tag", "train/lr"}, {"step", step}, {"value", *m.lr}});
    expect.push_back({{"tag", "train/tokens_per_s"}, {"step", step}, {"value", *m.tokens_per_s}});
  }
  ASSERT_TRUE(w->add_scalar("eval/accuracy", 20, 0.75, 1700000030.0).ok());
  expect.push_back({{"tag", "eval/accuracy"}, {"step", 20}, {"value", 0.75}});
  const std::string path = w->path();
  ASSERT_TRUE(w->close().ok());
  if (keep != nullptr) std::ofstream(dir + "/expect.json") << expect.dump(1) << "\n";

  auto recs = read_tfrecord_file(path);
  ASSERT_TRUE(recs.ok()) << recs.status().to_string();
  ASSERT_EQ(recs->records.size(), 22u);
  auto first = decode_event(recs->records[0]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->file_version.value_or(""), "brain.Event:2");
  EXPECT_EQ(first->source_writer, "vlpar.obs.TensorBoardWriter");
  auto e5 = decode_event(recs->records[5]);
  ASSERT_TRUE(e5.ok());
  EXPECT_EQ(e5->step, 5);
  EXPECT_EQ(e5->wall_time, 1700000005.0);
  ASSERT_EQ(e5->scalars.size(), 3u);
  EXPECT_EQ(e5->scalars[0].tag, "train/loss");
  EXPECT_EQ(e5->scalars[0].value, 1.0f);
  EXPECT_EQ(e5->scalars[2].tag, "train/tokens_per_s");
  EXPECT_EQ(e5->scalars[2].value, 1005.0f);
}

TEST(TensorBoardWriter, ResumeWritesPurgeMarkerAndNamesDoNotCollide) {
  TempDir tmp;
  TensorBoardWriter::Options opt;
  opt.wall_time = 1700000000.0;  // same second, same pid: the second file must get another name
  opt.resume_step = 41;
  auto a = TensorBoardWriter::create(tmp.str(), opt);
  auto b = TensorBoardWriter::create(tmp.str(), opt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->path(), b->path());
  EXPECT_EQ(b->path(), a->path() + ".1");
  ASSERT_TRUE(a->close().ok());
  auto recs = read_tfrecord_file(a->path());
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->records.size(), 2u);
  auto start = decode_event(recs->records[1]);
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->session_status.value_or(-1), 1);
  EXPECT_EQ(start->step, 42);
}

TEST(TensorBoardWriter, BadInputsAreStatuses) {
  TempDir tmp;
  auto w = TensorBoardWriter::create(tmp.str());
  ASSERT_TRUE(w.ok());
  const Status s = w->add_scalar("", 1, 1.0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty tag at step 1"), std::string::npos) << s.message();
  ASSERT_TRUE(w->close().ok());
  EXPECT_FALSE(w->add_scalar("x", 1, 1.0).ok());  // closed
  EXPECT_FALSE(TensorBoardWriter::create("").ok());
  std::ofstream(tmp.str() + "/file") << "x";
  EXPECT_FALSE(TensorBoardWriter::create(tmp.str() + "/file/sub").ok());  // a parent is a file
}

// A run dies after step 15 having checkpointed at step 10; the resumed run redoes 11..20 with other values.
// TensorBoard must show 1..10 from the first attempt and 11..20 from the second (the session-START marker of the
// second file purges the first file's steps >= 11). The C++ side checks the records; with VLPAR_OBS_TB_OUT set,
// <dir>/resume holds the files and expect.json for tools/golden/check_tensorboard.py.
TEST(TensorBoardWriter, ResumeScenario) {
  TempDir tmp;
  const char* keep = std::getenv("VLPAR_OBS_TB_OUT");
  const std::string dir = keep != nullptr ? std::string(keep) + "/resume" : tmp.str() + "/resume";
  if (keep != nullptr) fs::remove_all(dir);
  nlohmann::json expect = nlohmann::json::array();
  std::string first_path;
  {
    auto w = TensorBoardWriter::create(dir);
    ASSERT_TRUE(w.ok());
    first_path = w->path();
    for (int64_t step = 1; step <= 15; ++step) {
      ASSERT_TRUE(w->add_scalar("train/loss", step, static_cast<double>(step)).ok());
      if (step <= 10) expect.push_back({{"tag", "train/loss"}, {"step", step}, {"value", static_cast<double>(step)}});
    }
  }
  TensorBoardWriter::Options opt;
  opt.resume_step = 10;
  auto w = TensorBoardWriter::create(dir, opt);
  ASSERT_TRUE(w.ok());
  EXPECT_GT(w->path(), first_path);  // TensorBoard reads the files of a directory in name order
  for (int64_t step = 11; step <= 20; ++step) {
    ASSERT_TRUE(w->add_scalar("train/loss", step, 100.0 + static_cast<double>(step)).ok());
    expect.push_back({{"tag", "train/loss"}, {"step", step}, {"value", 100.0 + static_cast<double>(step)}});
  }
  ASSERT_TRUE(w->close().ok());
  if (keep != nullptr) std::ofstream(dir + "/expect.json") << expect.dump(1) << "\n";
  auto recs = read_tfrecord_file(w->path());
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->records.size(), 12u);  // file_version, session START, 10 scalars
  auto start = decode_event(recs->records[1]);
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->session_status.value_or(-1), 1);
  EXPECT_EQ(start->step, 11);
}
