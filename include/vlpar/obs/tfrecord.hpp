#pragma once
// TFRecord framing, the container of TensorBoard event files (spec/formats-and-conventions.md §4).
// One record, all integers little-endian:
//   u64 length | u32 masked_crc32c(the 8 length bytes) | length bytes of data | u32 masked_crc32c(data)
//   frame_tfrecord      : the 16 + length bytes of one record.
//   parse_tfrecords     : splits a byte buffer into records, verifying both CRCs of each; a truncated final record
//                         (a writer killed mid-write) is reported as `truncated_tail`, not as an error; any CRC
//                         mismatch is an error naming the record index and byte offset.
//   read_tfrecord_file  : parse_tfrecords over a whole file.
// Test: tests/unit/test_obs_tensorboard.cpp (against a file written by Python's torch/tensorboard writer).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::obs {

/// @brief The framed bytes of one record holding `data`.
std::string frame_tfrecord(std::string_view data);

struct TfRecords {
  std::vector<std::string> records;  // the data of each complete record, in file order
  bool truncated_tail = false;       // the buffer ends inside a record (its bytes are not in `records`)
};

/// @brief Splits `bytes` into records and checks every length and data CRC.
Result<TfRecords> parse_tfrecords(std::string_view bytes);

/// @brief Reads `path` and parses it with parse_tfrecords (errors name the file).
Result<TfRecords> read_tfrecord_file(const std::string& path);

}  // namespace vlpar::obs
