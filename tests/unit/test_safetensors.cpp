// safetensors reader/writer: golden files from the reference library (bit-exact reads, byte-identical writes), round
// trips of every dtype, dtype conversions against an exhaustive nearest-even reference, one test per malformed-file
// defect (each checks that the message names the file and the defect), and atomic replacement.
// Golden files: tests/fixtures/safetensors/ (tools/golden/make_safetensors_fixtures.py).
// Run: ctest --test-dir build/cpu -R Safetensors
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/io/safetensors.hpp"

namespace vlpar::io {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(VLPAR_FIXTURES_DIR) + "/safetensors";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::vector<std::byte> from_hex(const std::string& hex) {
  std::vector<std::byte> out;
  if (hex == "-") return out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(std::byte(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

/// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() /
             fmt::format("vlpar_st_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name())).string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Names of everything in the directory, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

/// The bytes of a safetensors file with the given header text and data buffer (header length = header.size()
/// unless `n` is given).
std::string make_file(const std::string& header, const std::string& data, uint64_t n = ~0ull) {
  if (n == ~0ull) n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

/// One entry of tests/fixtures/safetensors/mixed.expected.txt.
struct Expected {
  std::string name, dtype;
  std::vector<int64_t> dims;
  std::vector<std::byte> bytes;
};

std::vector<Expected> load_expected() {
  std::ifstream in(kFixtures + "/mixed.expected.txt");
  EXPECT_TRUE(in.good()) << "missing fixture " << kFixtures << "/mixed.expected.txt";
  std::vector<Expected> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name_hex, dtype, dims, data;
    ls >> name_hex >> dtype >> dims >> data;
    Expected e;
    for (std::byte b : from_hex(name_hex)) e.name += char(b);
    e.dtype = dtype;
    if (dims != "-") {
      std::istringstream ds(dims);
      std::string d;
      while (std::getline(ds, d, ',')) e.dims.push_back(std::stoll(d));
    }
    e.bytes = from_hex(data);
    out.push_back(std::move(e));
  }
  return out;
}

DType dtype_from(const std::string& s) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64})
    if (safetensors_dtype_name(t) == s) return t;
  ADD_FAILURE() << "unknown dtype " << s;
  return DType::kF32;
}

Shape shape_of(const std::vector<int64_t>& dims) {
  Shape s;
  s.ndim = int(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) s.dims[i] = dims[i];
  return s;
}

// Expects open() to fail with a message naming the file and containing `defect`.
void expect_open_error(const std::string& path, const std::string& defect) {
  auto r = SafetensorsFile::open(path);
  ASSERT_FALSE(r.ok()) << "open() accepted a file with defect: " << defect;
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(defect), std::string::npos)
      << "message does not name the defect '" << defect << "': " << r.status().message();
}

// ---- golden files ----------------------------------------------------------------------------------------------

TEST(SafetensorsGolden, ReadsReferenceFileBitExactly) {
  const std::string path = kFixtures + "/mixed.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const auto expected = load_expected();
  ASSERT_EQ(expected.size(), 9u);
  EXPECT_EQ(f->tensors().size(), expected.size());
  EXPECT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->data_start() % 8, 0u) << "reference writer pads the header to a multiple of 8";
  for (size_t i = 1; i < f->tensors().size(); ++i) EXPECT_LE(f->tensors()[i - 1].end, f->tensors()[i].begin);
  size_t nonzero = 0;
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.name);
    const TensorInfo* info = f->find(e.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype_name, e.dtype);
    EXPECT_TRUE(info->supported);
    EXPECT_EQ(info->dtype, dtype_from(e.dtype));
    EXPECT_EQ(info->dims, e.dims);
    EXPECT_TRUE(info->shape == shape_of(e.dims));
    ASSERT_EQ(info->nbytes(), e.bytes.size());
    const auto raw = f->bytes(*info);
    EXPECT_TRUE(std::equal(raw.begin(), raw.end(), e.bytes.begin()));
    std::vector<std::byte> out(e.bytes.size() + 1, std::byte{0xAB});  // +1: must not be written
    TensorView dst(out.data(), info->dtype, info->shape);
    ASSERT_TRUE(f->read(e.name, dst).ok());
    EXPECT_TRUE(std::equal(e.bytes.begin(), e.bytes.end(), out.begin())) << "read() is not bit-exact";
    EXPECT_EQ(out.back(), std::byte{0xAB});
    nonzero += size_t(std::count_if(e.bytes.begin(), e.bytes.end(), [](std::byte b) { return b != std::byte{0}; }));
  }
  EXPECT_GT(nonzero, 50u) << "fixture is vacuous";
  EXPECT_EQ(f->find("absent"), nullptr);
}

TEST(SafetensorsGolden, WritesReferenceBytes) {
  // The reference writer's layout is reproducible (the fixture regenerates to identical bytes) as long as the
  // metadata has one key; vlpar must produce the very same bytes for the same tensors, whatever their input order.
  auto expected = load_expected();
  std::reverse(expected.begin(), expected.end());
  std::vector<NamedTensor> tensors;
  for (Expected& e : expected) tensors.push_back({e.name, TensorView(e.bytes.data(), dtype_from(e.dtype), shape_of(e.dims))});
  TempDir tmp;
  ASSERT_TRUE(write_safetensors(tmp.file("mixed.safetensors"), tensors).ok());
  const std::string ours = read_bytes(tmp.file("mixed.safetensors"));
  const std::string ref = read_bytes(kFixtures + "/mixed.safetensors");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(ours.size(), ref.size());
  EXPECT_TRUE(ours == ref) << "first difference at byte "
                           << std::distance(ours.begin(), std::mismatch(ours.begin(), ours.end(), ref.begin(), ref.end()).first)
                           << "\nours: " << ours.substr(8, 200) << "\nref:  " << ref.substr(8, 200);
  EXPECT_EQ(tmp.listing(), std::vector<std::string>{"mixed.safetensors"});
}

TEST(SafetensorsGolden, UnsupportedDtypesValidateButDoNotRead) {
  const std::string path = kFixtures + "/unsupported.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 4u);
  for (const char* name : {"bytes", "mask", "fp8"}) {
    const TensorInfo* info = f->find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_FALSE(info->supported) << name;
    float dummy[4];
    const Status s = f->read(name, TensorView(dummy, DType::kF32, shape_of(info->dims)));
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.code(), StatusCode::kNotSupported);
    EXPECT_NE(s.message().find(info->dtype_name), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string("'") + name + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  }
  EXPECT_EQ(f->find("bytes")->dtype_name, "U8");
  EXPECT_EQ(f->find("mask")->dtype_name, "BOOL");
  EXPECT_EQ(f->find("fp8")->dtype_name, "F8_E4M3");
  float ok[2] = {};
  ASSERT_TRUE(f->read("ok", TensorView(ok, DType::kF32, Shape{2})).ok());
  EXPECT_EQ(ok[0], 1.5f);
  EXPECT_EQ(ok[1], -2.0f);
}

// ---- round trips -------------------------------------------------------------------------------------------------

// Random bit patterns (NaN payloads included) so that bit-exactness means something.
std::vector<std::byte> random_bytes(size_t n, uint64_t seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte(philox_element(seed, 7, i).v[0] & 0xffu);
  return out;
}

TEST(SafetensorsRoundTrip, EveryDtypeBitExact) {
  struct Case {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {"w.f32", DType::kF32, Shape{3, 5}},          {"w.bf16", DType::kBF16, Shape{7}},
      {"w.f16", DType::kF16, Shape{2, 3, 3}},       {"w.f64", DType::kF64, Shape{4, 1}},
      {"ids.i64", DType::kI64, Shape{5}},           {"ids.i32", DType::kI32, Shape{2, 2}},
      {"scalar.bf16", DType::kBF16, Shape{}},       {"empty.f32", DType::kF32, Shape{0, 4}},
      {"rank6.f16", DType::kF16, Shape{1, 2, 1, 3, 1, 2}}, {"b", DType::kF32, Shape{1}},
  };
  std::vector<std::vector<std::byte>> data;
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < cases.size(); ++i) {
    data.push_back(random_bytes(size_t(cases[i].shape.numel()) * dtype_size(cases[i].dtype), 100 + i));
    tensors.push_back({cases[i].name, TensorView(data.back().data(), cases[i].dtype, cases[i].shape)});
  }
  // A strided (non-contiguous) view: every other column of a [3, 4] f32 matrix.
  std::vector<float> wide(12);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = float(i) + 0.25f;
  TensorView strided(wide.data(), DType::kF32, Shape{3, 2});
  strided.strides[0] = 4;
  strided.strides[1] = 2;
  ASSERT_FALSE(strided.is_contiguous());
  tensors.push_back({"strided", strided});

  TempDir tmp;
  const std::string path = tmp.file("rt.safetensors");
  const std::map<std::string, std::string> meta = {{"step", "42"}, {"note", "q\"uote\n\u00e9"}};
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors().size(), tensors.size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("step"), "42");
  EXPECT_EQ(f->metadata().at("note"), "q\"uote\n\u00e9");
  EXPECT_EQ(f->data_start() % 8, 0u);
  for (const TensorInfo& t : f->tensors())  // the writer's order keeps every tensor naturally aligned
    EXPECT_EQ((f->data_start() + t.begin) % dtype_size(t.dtype), 0u) << t.name;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    std::vector<std::byte> back(data[i].size());
    ASSERT_TRUE(f->read(cases[i].name, TensorView(back.data(), cases[i].dtype, cases[i].shape)).ok());
    EXPECT_TRUE(back == data[i]);
    EXPECT_EQ(f->find(cases[i].name)->dtype_name, safetensors_dtype_name(cases[i].dtype));
  }
  float s[6];
  ASSERT_TRUE(f->read("strided", TensorView(s, DType::kF32, Shape{3, 2})).ok());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c) EXPECT_EQ(s[r * 2 + c], wide[size_t(r * 4 + c * 2)]) << r << "," << c;
}

TEST(SafetensorsRoundTrip, ReadsUnalignedData) {
  // A header of odd length (other writers do not pad): the f32/f64 data start at odd file offsets.
  std::string header = R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  if (header.size() % 2 == 0) header += ' ';
  ASSERT_EQ(header.size() % 2, 1u);
  const double a[2] = {1.0 / 3.0, -7.5};
  const float b = 0.1f;
  std::string data(20, '\0');
  std::memcpy(data.data(), a, 16);
  std::memcpy(data.data() + 16, &b, 4);
  TempDir tmp;
  write_bytes(tmp.file("odd.safetensors"), make_file(header, data));
  auto f = SafetensorsFile::open(tmp.file("odd.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  double ra[2];
  float rb;
  ASSERT_TRUE(f->read("a", TensorView(ra, DType::kF64, Shape{2})).ok());
  ASSERT_TRUE(f->read("b", TensorView(&rb, DType::kF32, Shape{1})).ok());
  EXPECT_EQ(std::memcmp(ra, a, 16), 0);
  EXPECT_EQ(std::memcmp(&rb, &b, 4), 0);
}

// ---- conversions ---------------------------------------------------------------------------------------------------

// Exhaustive reference for rounding a double to a 16-bit float format: all finite values of the format, sorted; the
// nearest wins, ties go to the even bit pattern; inf counts as the value 2^(emax+1) (IEEE overflow rule).
class Nearest16 {
 public:
  explicit Nearest16(bool is_bf16) {
    for (uint32_t u = 0; u < 0x8000u; ++u) {  // non-negative patterns
      const float f = is_bf16 ? bf16_to_float(bf16{uint16_t(u)}) : f16_to_float(f16{uint16_t(u)});
      if (std::isnan(f)) continue;
      const double v = std::isinf(f) ? (is_bf16 ? std::ldexp(1.0, 128) : 65536.0) : double(f);
      values_.push_back({v, uint16_t(u)});
    }
    std::sort(values_.begin(), values_.end());
  }
  uint16_t operator()(double d) const {
    const uint16_t sign = std::signbit(d) ? 0x8000u : 0u;
    const double a = std::fabs(d);
    auto hi = std::lower_bound(values_.begin(), values_.end(), std::make_pair(a, uint16_t(0)));
    if (hi == values_.end()) return uint16_t(sign | values_.back().second);  // beyond inf's value: inf
    if (hi->first == a || hi == values_.begin()) return uint16_t(sign | hi->second);
    const auto lo = hi - 1;
    const double dlo = a - lo->first, dhi = hi->first - a;
    if (dlo < dhi) return uint16_t(sign | lo->second);
    if (dhi < dlo) return uint16_t(sign | hi->second);
    return uint16_t(sign | ((lo->second & 1u) ? hi->second : lo->second));
  }

 private:
  std::vector<std::pair<double, uint16_t>> values_;
};

// v + half an ulp (away from zero) in a format with p significand bits whose smallest normal has frexp exponent
// emin: the tie point above v.
double tie_above(double v, int p, int emin) {
  int e = 0;
  std::frexp(v, &e);
  if (v == 0 || e < emin) e = emin;
  return v + std::copysign(std::ldexp(1.0, e - p - 1), v);
}

// Doubles that stress rounding: random magnitudes over the whole f16/bf16 range, exact tie points of bf16 and f16,
// tie points nudged by far less than a float ulp (where double rounding through float goes wrong), overflow
// boundaries and subnormals.
std::vector<double> hard_doubles() {
  std::vector<double> out = {0.0, -0.0, 1.0, 1.0 + 0x1p-8 + 0x1p-30, 1.0 + 0x1p-8, 1.0 + 0x1p-8 - 0x1p-40,
                             1.0 + 0x1p-11 + 0x1p-35, 65504.0, 65519.99999, 65520.0, 65520.0001, -65520.0,
                             3.3895313892515355e38, 3.39e38, 3.4e38, 1e300, -1e300, 0x1p-24, 0x1p-25,
                             0x1p-25 + 0x1p-60, 0x1p-133, 0x1p-134, 0x1p-134 + 0x1p-170, 1e-310,
                             std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  for (uint64_t i = 0; i < 20000; ++i) {
    const Philox4 rnd = philox_element(777, 3, i);
    const uint32_t* r = rnd.v;
    const double mant = 1.0 + double(r[0]) / 4294967296.0 + double(r[1]) / 18446744073709551616.0;
    const int exp = int(r[2] % 300u) - 150;  // spans subnormal bf16 .. bf16 overflow
    double d = std::ldexp(mant, exp);
    if (r[3] & 1u) d = -d;
    out.push_back(d);
    const double ties[2] = {tie_above(double(bf16_to_float(bf16{uint16_t(float_bits(float(d)) >> 16)})), 8, -125),
                            tie_above(double(f16_to_float(float_to_f16(float(d)))), 11, -13)};
    for (const double t : ties) {
      if (std::isinf(t)) continue;
      out.push_back(t);
      out.push_back(t * (1.0 + 0x1p-40));  // not a tie any more, but float cannot tell
      out.push_back(t * (1.0 - 0x1p-40));
    }
  }
  return out;
}

TEST(SafetensorsConvert, F64NarrowsWithOneRounding) {
  const std::vector<double> in = hard_doubles();
  TempDir tmp;
  const std::string path = tmp.file("f64.safetensors");
  const Shape shape{int64_t(in.size())};
  const NamedTensor t{"x", TensorView(const_cast<double*>(in.data()), DType::kF64, shape)};
  ASSERT_TRUE(write_safetensors(path, std::span(&t, 1)).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<bf16> b(in.size());
  std::vector<f16> h(in.size());
  std::vector<float> s(in.size());
  ASSERT_TRUE(f->read("x", TensorView(b.data(), DType::kBF16, shape)).ok());
  ASSERT_TRUE(f->read("x", TensorView(h.data(), DType::kF16, shape)).ok());
  ASSERT_TRUE(f->read("x", TensorView(s.data(), DType::kF32, shape)).ok());
  const Nearest16 ref_bf16(true), ref_f16(false);
  int bad_b = 0, bad_h = 0, bad_s = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (b[i].bits != ref_bf16(in[i]) && ++bad_b <= 5)
      ADD_FAILURE() << "bf16 of " << std::hexfloat << in[i] << ": got " << std::hex << b[i].bits << " want " << ref_bf16(in[i]);
    if (h[i].bits != ref_f16(in[i]) && ++bad_h <= 5)
      ADD_FAILURE() << "f16 of " << std::hexfloat << in[i] << ": got " << std::hex << h[i].bits << " want " << ref_f16(in[i]);
    // f32: the neighbours of d bracket it and the nearer one (ties to even) was chosen.
    const double d = in[i], got = double(s[i]);
    if (std::isinf(d)) continue;
    const float lo = std::nextafter(s[i], -INFINITY), hi = std::nextafter(s[i], INFINITY);
    const double flt_overflow = double(std::numeric_limits<float>::max()) + 0x1p103;  // max + half its ulp
    const bool ok = std::isinf(got) ? std::fabs(d) >= flt_overflow
                                    : std::fabs(got - d) <= std::fabs(double(lo) - d) &&
                                          std::fabs(got - d) <= std::fabs(double(hi) - d);
    if (!ok && ++bad_s <= 5) ADD_FAILURE() << "f32 of " << std::hexfloat << d << " got " << got;
  }
  EXPECT_EQ(bad_b, 0);
  EXPECT_EQ(bad_h, 0);
  EXPECT_EQ(bad_s, 0);
  // The classic double-rounding trap, spelled out: 1 + 2^-8 + 2^-30 must round up to 1 + 2^-7 in bf16.
  EXPECT_EQ(b[3].bits, 0x3f81);
}

TEST(SafetensorsConvert, FloatWideningExactAndNarrowingMatchesHelpers) {
  // Source: every bf16 and every f16 bit pattern, and f32 values, written in their own dtype.
  std::vector<bf16> all_b(65536);
  std::vector<f16> all_h(65536);
  for (uint32_t u = 0; u < 65536; ++u) {
    all_b[u].bits = uint16_t(u);
    all_h[u].bits = uint16_t(u);
  }
  std::vector<float> fl(4096);
  for (size_t i = 0; i < fl.size(); ++i) fl[i] = bits_float(philox_element(5, 1, i).v[0]);
  const NamedTensor ts[] = {{"b", TensorView(all_b.data(), DType::kBF16, Shape{65536})},
                            {"h", TensorView(all_h.data(), DType::kF16, Shape{65536})},
                            {"f", TensorView(fl.data(), DType::kF32, Shape{4096})}};
  TempDir tmp;
  const std::string path = tmp.file("conv.safetensors");
  ASSERT_TRUE(write_safetensors(path, ts).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)); };
  {  // bf16 -> f32, f64 exact; bf16 -> f16 rounds once (exact bf16 -> float, then the f16 helper)
    std::vector<float> o32(65536);
    std::vector<double> o64(65536);
    std::vector<f16> o16(65536);
    ASSERT_TRUE(f->read("b", TensorView(o32.data(), DType::kF32, Shape{65536})).ok());
    ASSERT_TRUE(f->read("b", TensorView(o64.data(), DType::kF64, Shape{65536})).ok());
    ASSERT_TRUE(f->read("b", TensorView(o16.data(), DType::kF16, Shape{65536})).ok());
    int bad = 0;
    for (size_t i = 0; i < 65536; ++i) {
      const float v = bf16_to_float(all_b[i]);
      bad += !same(o32[i], v) + !same(o64[i], v) + (o16[i].bits != float_to_f16(v).bits);
    }
    EXPECT_EQ(bad, 0);
  }
  {  // f16 -> f32, f64 exact; f16 -> bf16 rounds once
    std::vector<float> o32(65536);
    std::vector<double> o64(65536);
    std::vector<bf16> o16(65536);
    ASSERT_TRUE(f->read("h", TensorView(o32.data(), DType::kF32, Shape{65536})).ok());
    ASSERT_TRUE(f->read("h", TensorView(o64.data(), DType::kF64, Shape{65536})).ok());
    ASSERT_TRUE(f->read("h", TensorView(o16.data(), DType::kBF16, Shape{65536})).ok());
    int bad = 0;
    for (size_t i = 0; i < 65536; ++i) {
      const float v = f16_to_float(all_h[i]);
      bad += !same(o32[i], v) + !same(o64[i], v) + (o16[i].bits != float_to_bf16(v).bits);
    }
    EXPECT_EQ(bad, 0);
  }
  {  // f32 -> f64 exact, -> bf16/f16 through the vlpar helpers
    std::vector<double> o64(4096);
    std::vector<bf16> ob(4096);
    std::vector<f16> oh(4096);
    ASSERT_TRUE(f->read("f", TensorView(o64.data(), DType::kF64, Shape{4096})).ok());
    ASSERT_TRUE(f->read("f", TensorView(ob.data(), DType::kBF16, Shape{4096})).ok());
    ASSERT_TRUE(f->read("f", TensorView(oh.data(), DType::kF16, Shape{4096})).ok());
    int bad = 0;
    for (size_t i = 0; i < 4096; ++i)
      bad += !same(o64[i], fl[i]) + (ob[i].bits != float_to_bf16(fl[i]).bits) + (oh[i].bits != float_to_f16(fl[i]).bits);
    EXPECT_EQ(bad, 0);
  }
}

TEST(SafetensorsConvert, IntegersWidenAndRangeCheck) {
  int32_t i32[4] = {std::numeric_limits<int32_t>::min(), -1, 0, std::numeric_limits<int32_t>::max()};
  int64_t in_range[3] = {std::numeric_limits<int32_t>::min(), 5, std::numeric_limits<int32_t>::max()};
  int64_t out_of_range[3] = {1, int64_t(1) << 31, 2};
  const NamedTensor ts[] = {{"i32", TensorView(i32, DType::kI32, Shape{4})},
                            {"ok64", TensorView(in_range, DType::kI64, Shape{3})},
                            {"big64", TensorView(out_of_range, DType::kI64, Shape{3})}};
  TempDir tmp;
  const std::string path = tmp.file("ints.safetensors");
  ASSERT_TRUE(write_safetensors(path, ts).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  int64_t wide[4];
  ASSERT_TRUE(f->read("i32", TensorView(wide, DType::kI64, Shape{4})).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(wide[i], int64_t(i32[i]));
  int32_t narrow[3];
  ASSERT_TRUE(f->read("ok64", TensorView(narrow, DType::kI32, Shape{3})).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(int64_t(narrow[i]), in_range[i]);
  const Status s = f->read("big64", TensorView(narrow, DType::kI32, Shape{3}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("2147483648"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'big64'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

TEST(SafetensorsConvert, RejectsFloatIntMixShapeMismatchAndAbsentNames) {
  const std::string path = kFixtures + "/mixed.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  float fbuf[6];
  int64_t ibuf[6];
  Status s = f->read("ids.i64", TensorView(fbuf, DType::kF32, Shape{4}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("integer -> float"), std::string::npos) << s.message();
  s = f->read("model.f32", TensorView(ibuf, DType::kI64, Shape{2, 3}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("float -> integer"), std::string::npos) << s.message();
  s = f->read("model.f32", TensorView(fbuf, DType::kF32, Shape{3, 2}));  // same numel, other shape
  ASSERT_FALSE(s.ok());
  for (const char* part : {"'model.f32'", "[2, 3]", "[3, 2]"}) EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  s = f->read("nope", TensorView(fbuf, DType::kF32, Shape{1}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'nope'"), std::string::npos) << s.message();
  TensorView strided(fbuf, DType::kF32, Shape{2, 3});
  strided.strides[0] = 1;
  strided.strides[1] = 2;
  s = f->read("model.f32", strided);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not contiguous"), std::string::npos) << s.message();
}

TEST(SafetensorsDevice, CudaViewsGoThroughHostStaging) {
  // Reading into / writing from CUDA views stages through host memory with copy_. Without a usable device the calls
  // must fail cleanly (never touch the device pointer from the host); with one, the round trip is bit-exact.
  const std::string path = kFixtures + "/mixed.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  TempDir tmp;
  if (cuda_device_count() == 0) {
    void* not_host = reinterpret_cast<void*>(uintptr_t(16));  // never dereferenced by a correct implementation
    const TensorView dev(not_host, DType::kF32, Shape{2, 3}, Device::cuda(0));
    EXPECT_FALSE(f->read("model.f32", dev).ok());
    const NamedTensor t{"x", dev};
    EXPECT_FALSE(write_safetensors(tmp.file("dev.safetensors"), std::span(&t, 1)).ok());
    EXPECT_TRUE(tmp.listing().empty());
    GTEST_SKIP() << "no CUDA device: checked the clean failure only";
  }
  Allocator alloc;
  Tensor dev = Tensor::empty(alloc, Shape{2, 3}, DType::kBF16, Device::cuda(0)).value();
  ASSERT_TRUE(f->read("model.f32", dev.view()).ok());
  const NamedTensor t{"x", dev.view()};
  ASSERT_TRUE(write_safetensors(tmp.file("dev.safetensors"), std::span(&t, 1)).ok());
  auto g = SafetensorsFile::open(tmp.file("dev.safetensors"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  bf16 back[6], want[6];
  ASSERT_TRUE(g->read("x", TensorView(back, DType::kBF16, Shape{2, 3})).ok());
  ASSERT_TRUE(f->read("model.f32", TensorView(want, DType::kBF16, Shape{2, 3})).ok());
  EXPECT_EQ(std::memcmp(back, want, sizeof(back)), 0);
}

// ---- malformed files: one test per defect ---------------------------------------------------------------------------

const std::string kEntryA = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kData8(8, '\x01');

class SafetensorsMalformed : public ::testing::Test {
 protected:
  // Writes the bytes to a file named after the test and expects open() to fail naming the file and `defect`.
  void expect_bad(const std::string& bytes, const std::string& defect) {
    const std::string path = tmp_.file(fmt::format("case{}.safetensors", n_++));
    write_bytes(path, bytes);
    SCOPED_TRACE(defect);
    expect_open_error(path, defect);
  }
  void expect_good(const std::string& bytes) {
    const std::string path = tmp_.file(fmt::format("good{}.safetensors", n_++));
    write_bytes(path, bytes);
    auto r = SafetensorsFile::open(path);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
  }
  TempDir tmp_;
  int n_ = 0;
};

TEST_F(SafetensorsMalformed, AcceptsTheValidBaseline) {
  // The same construction the defect tests mutate, so each of them fails for its own defect only.
  expect_good(make_file("{" + kEntryA + "}", kData8));
  expect_good(make_file("{" + kEntryA + "}   ", kData8));              // space padding
  expect_good(make_file("{}", ""));                                      // no tensors
  expect_good(make_file(R"({"__metadata__":null,)" + kEntryA + "}", kData8));
  expect_good(make_file(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)" + kEntryA + "}", kData8));
  expect_good(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", kData8));
}

TEST_F(SafetensorsMalformed, ShorterThanEightBytes) {
  expect_bad("", "shorter than the 8-byte header length");
  expect_bad(std::string(7, '\0'), "shorter than the 8-byte header length");
}

TEST_F(SafetensorsMalformed, HeaderTooLarge) {
  expect_bad(make_file("{}", "", 100'000'001ull), "exceeds the limit of 100000000 bytes");
}

TEST_F(SafetensorsMalformed, HeaderPastEndOfFile) {
  const std::string header = "{" + kEntryA + "}";
  expect_bad(make_file(header, "", header.size() + 1), "runs past the end of the file");
  expect_bad(make_file(header, kData8, header.size() + 9), "runs past the end of the file");
}

TEST_F(SafetensorsMalformed, HeaderNotUtf8) {
  expect_bad(make_file("{\"a\xff\":{}}", ""), "not valid UTF-8");
  expect_bad(make_file("{\"\xed\xa0\x80\":{}}", ""), "not valid UTF-8");  // an encoded surrogate
  expect_bad(make_file("{\"\xc0\xaf\":{}}", ""), "not valid UTF-8");      // overlong '/'
}

TEST_F(SafetensorsMalformed, HeaderNotStartingWithBrace) {
  expect_bad(make_file(" {" + kEntryA + "}", kData8), "does not start with '{'");
  expect_bad(make_file("[]", ""), "does not start with '{'");
  expect_bad(make_file("", ""), "does not start with '{'");
}

TEST_F(SafetensorsMalformed, HeaderNotJson) {
  expect_bad(make_file("{" + kEntryA, kData8), "not valid JSON");
  expect_bad(make_file("{" + kEntryA + "}" + std::string(2, '\0'), kData8), "not valid JSON");  // NUL padding is not whitespace
  expect_bad(make_file("{\"a\":1,}", ""), "not valid JSON");
  expect_bad(make_file("{}" + std::string(1, '\0') + "xyz", ""), "not valid JSON");  // garbage after a NUL
}

TEST_F(SafetensorsMalformed, EntryMissingField) {
  expect_bad(make_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", kData8), "entry 'a' has no dtype");
  expect_bad(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", kData8), "entry 'a' has no shape");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2]}})", kData8), "entry 'a' has no data_offsets");
}

TEST_F(SafetensorsMalformed, EntryWrongTypes) {
  expect_bad(make_file(R"({"a":[1,2]})", ""), "entry 'a' is a array, not an object");
  expect_bad(make_file(R"({"a":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", kData8), "dtype is a number");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", kData8), "shape is a string");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", kData8), "shape holds a number, not an integer");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", kData8), "data_offsets is not an array of two");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", kData8), "not a non-negative integer");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", kData8), "not a non-negative integer");
}

TEST_F(SafetensorsMalformed, UnknownDtype) {
  expect_bad(make_file(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", kData8), "unknown dtype 'F17'");
  expect_bad(make_file(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", kData8), "unknown dtype 'f32'");
}

TEST_F(SafetensorsMalformed, NegativeDimension) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kData8), "negative dimension -2");
}

TEST_F(SafetensorsMalformed, OverflowingShape) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", kData8),
             "overflows the 64-bit byte count");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", kData8),
             "overflows the 64-bit byte count");  // numel fits, bytes do not
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}})", ""),
             "overflows int64");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}})", kData8),
             "not an integer");  // beyond u64: JSON number that is not an integer type
}

TEST_F(SafetensorsMalformed, SubByteDtypeNotWholeBytes) {
  expect_bad(make_file(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "ab"), "not a whole number of bytes");
  expect_good(make_file(R"({"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", "ab"));
}

TEST_F(SafetensorsMalformed, SizeDoesNotMatchShape) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,6]}})", std::string(6, 'x')),
             "span 6 bytes but F32 [2] needs 8 bytes");
  expect_bad(make_file(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", kData8),
             "span 8 bytes but BF16 [2] needs 4 bytes");
}

TEST_F(SafetensorsMalformed, EndBeforeBegin) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kData8), "end 0 < begin 8");
}

TEST_F(SafetensorsMalformed, OffsetsNotStartingAtZero) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, 'x')),
             "the first tensor 'a' starts at byte 4, not 0");
}

TEST_F(SafetensorsMalformed, OffsetsLeaveAHole) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                       std::string(16, 'x')),
             "hole: bytes [8, 12) between 'a' and 'b'");
}

TEST_F(SafetensorsMalformed, OffsetsOverlap) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       std::string(12, 'x')),
             "overlap: 'b' [4, 12] starts before 'a' ends at 8");
  // Two entries on the very same bytes (a polyglot trick): also an overlap.
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                       kData8),
             "overlap");
}

TEST_F(SafetensorsMalformed, Truncated) {
  expect_bad(make_file("{" + kEntryA + "}", std::string(5, 'x')), "truncated: the tensors need 8 bytes of data but only 5");
}

TEST_F(SafetensorsMalformed, TrailingBytes) {
  expect_bad(make_file("{" + kEntryA + "}", kData8 + "zz"), "2 trailing bytes after the last tensor");
  expect_bad(make_file("{}", "z"), "1 trailing bytes");
}

TEST_F(SafetensorsMalformed, DuplicateKeys) {
  expect_bad(make_file("{" + kEntryA + "," + kEntryA + "}", kData8), "duplicate key 'a' in the header");
  expect_bad(make_file(R"({"__metadata__":{"k":"1","k":"2"},)" + kEntryA + "}", kData8), "duplicate key 'k' inside '__metadata__'");
  expect_bad(make_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kData8),
             "duplicate key 'dtype' inside 'a'");
}

TEST_F(SafetensorsMalformed, MetadataNotStrings) {
  expect_bad(make_file(R"({"__metadata__":{"format":"pt","step":1},)" + kEntryA + "}", kData8),
             "__metadata__ value of 'step' is a number, not a string");
  expect_bad(make_file(R"({"__metadata__":{"nested":{"x":"y"}},)" + kEntryA + "}", kData8),
             "__metadata__ value of 'nested' is a object");
  expect_bad(make_file(R"({"__metadata__":"pt",)" + kEntryA + "}", kData8), "__metadata__ is a string, not an object");
}

TEST_F(SafetensorsMalformed, MissingFileAndDirectory) {
  const std::string missing = tmp_.file("missing.safetensors");
  auto r = SafetensorsFile::open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find(missing), std::string::npos);
  fs::create_directories(tmp_.file("adir"));
  expect_open_error(tmp_.file("adir"), "not a regular file");
}

// ---- writer validation and atomicity ---------------------------------------------------------------------------------

class SafetensorsWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_.file("model.safetensors");
    old_ = {1.f, 2.f, 3.f};
    const NamedTensor t{"old", TensorView(old_.data(), DType::kF32, Shape{3})};
    ASSERT_TRUE(write_safetensors(path_, std::span(&t, 1)).ok());
    old_bytes_ = read_bytes(path_);
    ASSERT_FALSE(old_bytes_.empty());
  }
  // After a failed write: the old file is intact and nothing else is in the directory.
  void expect_old_survives() {
    EXPECT_EQ(read_bytes(path_), old_bytes_) << "a failed write damaged the existing file";
    EXPECT_EQ(tmp_.listing(), std::vector<std::string>{"model.safetensors"}) << "a temporary file remains";
  }
  TempDir tmp_;
  std::string path_;
  std::vector<float> old_;
  std::string old_bytes_;
};

TEST_F(SafetensorsWrite, ReplacesExistingFileAndLeavesNoTemporary) {
  float v[2] = {7.f, 8.f};
  const NamedTensor t{"new", TensorView(v, DType::kF32, Shape{2})};
  ASSERT_TRUE(write_safetensors(path_, std::span(&t, 1)).ok());
  EXPECT_EQ(tmp_.listing(), std::vector<std::string>{"model.safetensors"});
  auto f = SafetensorsFile::open(path_);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->find("old"), nullptr);
  ASSERT_NE(f->find("new"), nullptr);
}

TEST_F(SafetensorsWrite, DuplicateNamesFailAndKeepOldFile) {
  float v[2] = {7.f, 8.f};
  const NamedTensor ts[] = {{"x", TensorView(v, DType::kF32, Shape{2})}, {"x", TensorView(v, DType::kF32, Shape{1})}};
  const Status s = write_safetensors(path_, ts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("duplicate tensor name 'x'"), std::string::npos) << s.message();
  expect_old_survives();
}

TEST_F(SafetensorsWrite, InvalidTensorsFailAndKeepOldFile) {
  float v[2] = {7.f, 8.f};
  {
    const NamedTensor t{"__metadata__", TensorView(v, DType::kF32, Shape{2})};
    const Status s = write_safetensors(path_, std::span(&t, 1));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("reserved"), std::string::npos) << s.message();
  }
  {
    const NamedTensor t{"null", TensorView(nullptr, DType::kF32, Shape{2})};
    const Status s = write_safetensors(path_, std::span(&t, 1));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("null data"), std::string::npos) << s.message();
  }
  {
    const NamedTensor t{"bad\xff", TensorView(v, DType::kF32, Shape{2})};
    const Status s = write_safetensors(path_, std::span(&t, 1));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("not valid UTF-8"), std::string::npos) << s.message();
  }
  {
    const NamedTensor t{"neg", TensorView(v, DType::kF32, Shape{-1})};
    const Status s = write_safetensors(path_, std::span(&t, 1));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("negative size"), std::string::npos) << s.message();
  }
  expect_old_survives();
}

TEST_F(SafetensorsWrite, IoFailureMidWriteKeepsOldFileAndRemovesTemporary) {
  // Cap the file size below the new file's: write() fails with EFBIG half-way through the data.
  std::vector<float> big(4096, 1.f);
  const NamedTensor t{"big", TensorView(big.data(), DType::kF32, Shape{4096})};
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit cap = saved;
  cap.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &cap), 0);
  const Status s = write_safetensors(path_, std::span(&t, 1));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(".tmp."), std::string::npos) << s.message();
  expect_old_survives();
}

TEST_F(SafetensorsWrite, TemporaryPathOccupiedFailsCleanly) {
  // Something that is not ours sits at the temporary name: the write fails and leaves it (and the old file) alone.
  const std::string occupied = fmt::format("{}.tmp.{}", path_, ::getpid());
  fs::create_directories(occupied + "/inside");
  float v[2] = {7.f, 8.f};
  const NamedTensor t{"x", TensorView(v, DType::kF32, Shape{2})};
  const Status s = write_safetensors(path_, std::span(&t, 1));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(occupied), std::string::npos) << s.message();
  EXPECT_TRUE(fs::is_directory(occupied + "/inside"));
  fs::remove_all(occupied);
  expect_old_survives();
}

TEST_F(SafetensorsWrite, MissingDirectoryFails) {
  float v[2] = {7.f, 8.f};
  const NamedTensor t{"x", TensorView(v, DType::kF32, Shape{2})};
  const std::string path = tmp_.file("no/such/dir/model.safetensors");
  const Status s = write_safetensors(path, std::span(&t, 1));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  expect_old_survives();
}

TEST_F(SafetensorsWrite, HeaderIsReferenceShaped) {
  // Compact JSON, "__metadata__" first with "format":"pt", padded with spaces to a multiple of 8, offsets in order.
  float f32[3] = {1, 2, 3};
  int64_t i64[1] = {9};
  bf16 b[1] = {float_to_bf16(1.f)};
  const NamedTensor ts[] = {{"b", TensorView(b, DType::kBF16, Shape{1})},
                            {"f", TensorView(f32, DType::kF32, Shape{3})},
                            {"i", TensorView(i64, DType::kI64, Shape{1})}};
  const std::string path = tmp_.file("h.safetensors");
  ASSERT_TRUE(write_safetensors(path, ts, {{"k", "v"}}).ok());
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  const std::string want =
      R"({"__metadata__":{"format":"pt","k":"v"},"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("f":{"dtype":"F32","shape":[3],"data_offsets":[8,20]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[20,22]}})";
  EXPECT_EQ(header.substr(0, want.size()), want);
  EXPECT_EQ(header.find_first_not_of(' ', want.size()), std::string::npos) << "padding must be spaces";
  EXPECT_EQ(bytes.size(), 8 + n + 22);
}

}  // namespace
}  // namespace vlpar::io
