/// @file npy.h
/// @brief Reads and writes NumPy .npy files (format 1.0/2.0), so results can be checked with NumPy or PyTorch.
///
/// `numpy.load("o.npy")` reads what write_npy() writes; read_npy() reads C-ordered arrays that
/// `numpy.save` writes. Element types: float32 ('<f4') and float16 ('<f2'); bfloat16 has no NumPy
/// type of its own, so 16-bit brain floats are exchanged as float32. Errors throw std::runtime_error
/// with the path and what was wrong.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa {

/// An array read from an .npy file: its shape, NumPy type string and raw little-endian bytes.
struct NpyArray {
    std::vector<std::size_t> shape;
    std::string descr;                ///< "<f4", "<f2", ...
    std::vector<unsigned char> bytes;

    /// Number of elements (product of the shape; 1 for a 0-d array).
    std::size_t count() const {
        std::size_t n = 1;
        for (std::size_t s : shape) n *= s;
        return n;
    }
};

/// "(2, 3, 4)" as NumPy writes shapes; "(5,)" for one dimension.
inline std::string npy_shape_text(const std::vector<std::size_t>& shape) {
    std::string t = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
    return t + (shape.size() == 1 ? ",)" : ")");
}

/// Writes n = prod(shape) elements of `elem_size` bytes with NumPy type `descr`.
inline void write_npy(const std::string& path, const void* data, const std::string& descr,
                      std::size_t elem_size, const std::vector<std::size_t>& shape) {
    std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " +
                         npy_shape_text(shape) + ", }";
    // magic(6) + version(2) + length(2) + header + '\n' must be a multiple of 64 bytes
    const std::size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + path);
    const unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                        (unsigned char)(header.size() & 0xFF),
                                        (unsigned char)(header.size() >> 8)};
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    const bool ok = std::fwrite(preamble, 1, 10, f) == 10 &&
                    std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
                    std::fwrite(data, elem_size, n, f) == n;
    if (std::fclose(f) != 0 || !ok) throw std::runtime_error("error writing " + path);
}

/// Writes a float32 array.
inline void write_npy(const std::string& path, const float* data,
                      const std::vector<std::size_t>& shape) {
    write_npy(path, data, "<f4", sizeof(float), shape);
}

/// The dimensions of an .npy header's shape text ("2, 3, 4" or "5,"): whole numbers only, each
/// within 64 bits. Throws a message naming the text otherwise.
inline std::vector<std::size_t> parse_npy_shape(const std::string& dims) {
    std::vector<std::size_t> shape;
    const std::runtime_error bad("shape (" + dims + ") is not a list of whole numbers");
    for (std::size_t p = 0; p <= dims.size();) {
        std::size_t comma = dims.find(',', p);
        if (comma == std::string::npos) comma = dims.size();
        const std::size_t b = dims.find_first_not_of(' ', p);
        const std::size_t e = dims.find_last_not_of(' ', comma - 1);
        if (b < comma) {
            std::size_t v = 0;
            for (std::size_t i = b; i <= e; ++i) {
                const char c = dims[i];
                if (c < '0' || c > '9' || v > (SIZE_MAX - std::size_t(c - '0')) / 10) throw bad;
                v = v * 10 + std::size_t(c - '0');
            }
            shape.push_back(v);
        } else if (comma < dims.size()) {
            throw bad;  // an empty entry before a comma: "(, 2)"
        }
        p = comma + 1;
    }
    return shape;
}

/// Bytes per element of a supported NumPy type string (floats '<f4', '<f2', '<f8'; integers
/// '<i4', '<i8'), 0 for any other.
inline std::size_t npy_element_size(const std::string& descr) {
    return descr == "<f4" || descr == "<i4" ? 4 : descr == "<f2" ? 2 : descr == "<f8" || descr == "<i8" ? 8 : 0;
}

/// What an .npy file's header says, checked against the file: its shape, type, and where and how
/// many bytes of data follow.
struct NpyHeader {
    std::vector<std::size_t> shape;
    std::string descr;            ///< "<f4", "<f2", "<f8", "<i4" or "<i8"
    std::size_t data_offset = 0;  ///< bytes before the data
    std::size_t data_bytes = 0;   ///< prod(shape) · element size: exactly what follows the header
};

/// Reads and checks an .npy file's header (C order only; element types '<f4', '<f2', '<f8', '<i4', '<i8')
/// without reading its data. Every length is checked against the file's size before anything is
/// allocated for it: a header length field, or a shape, that promises more than the file holds is
/// an error, and so are bytes left over after the array's data. Errors throw std::runtime_error
/// "PATH: what is wrong".
inline NpyHeader read_npy_header(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("cannot open " + path);
    auto fail = [&](const std::string& why) {
        std::fclose(f);
        return std::runtime_error(path + ": " + why);
    };
    long file_size = -1;
    if (std::fseek(f, 0, SEEK_END) == 0) file_size = std::ftell(f);
    if (file_size < 0 || std::fseek(f, 0, SEEK_SET) != 0) throw fail("cannot find the file's size");
    unsigned char pre[12];
    if (std::fread(pre, 1, 8, f) != 8 || pre[0] != 0x93 || std::string((char*)pre + 1, 5) != "NUMPY")
        throw fail("not an .npy file");
    // version 1.0: a 2-byte header length; 2.0 and 3.0: 4 bytes (little-endian)
    const std::size_t len_bytes = pre[6] == 1 ? 2 : pre[6] == 2 || pre[6] == 3 ? 4 : 0;
    if (len_bytes == 0) throw fail("unsupported .npy version " + std::to_string(pre[6]));
    if (std::fread(pre + 8, 1, len_bytes, f) != len_bytes) throw fail("truncated header");
    std::size_t header_len = 0;
    for (std::size_t i = 0; i < len_bytes; ++i) header_len |= std::size_t(pre[8 + i]) << (8 * i);
    const std::size_t data_offset = 8 + len_bytes + header_len;
    if (data_offset > std::size_t(file_size))
        throw fail("truncated header: its length field says " + std::to_string(header_len) + " bytes, the file has " +
                   std::to_string(file_size) + " bytes in all");
    std::string header(header_len, '\0');
    if (std::fread(&header[0], 1, header_len, f) != header_len) throw fail("truncated header");
    std::fclose(f);
    f = nullptr;
    auto bad = [&](const std::string& why) { return std::runtime_error(path + ": " + why); };

    NpyHeader h;
    h.data_offset = data_offset;
    const std::size_t d = header.find("'descr'");
    const std::size_t q1 = d == std::string::npos ? d : header.find('\'', header.find(':', d) + 1);
    const std::size_t q2 = q1 == std::string::npos ? q1 : header.find('\'', q1 + 1);
    if (q2 == std::string::npos) throw bad("header has no 'descr'");
    h.descr = header.substr(q1 + 1, q2 - q1 - 1);
    if (header.find("'fortran_order': True") != std::string::npos)
        throw bad("Fortran-ordered arrays are not supported (save with numpy.ascontiguousarray)");
    const std::size_t s0 = header.find('(', header.find("'shape'"));
    const std::size_t s1 = header.find(')', s0);
    if (s0 == std::string::npos || s1 == std::string::npos) throw bad("header has no 'shape'");
    try {
        h.shape = parse_npy_shape(header.substr(s0 + 1, s1 - s0 - 1));
    } catch (const std::runtime_error& e) {
        throw bad(e.what());
    }
    const std::size_t elem = npy_element_size(h.descr);
    if (elem == 0)
        throw bad("unsupported element type '" + h.descr + "' (expected '<f4', '<f2', '<f8', '<i4' or '<i8')");
    h.data_bytes = elem;
    for (std::size_t s : h.shape)
        if (s != 0 && h.data_bytes > SIZE_MAX / s)
            throw bad("shape " + npy_shape_text(h.shape) + " has more bytes than 64 bits can count");
        else
            h.data_bytes *= s;
    const std::size_t there = std::size_t(file_size) - data_offset;
    if (h.data_bytes > there)
        throw bad("file is shorter than its shape " + npy_shape_text(h.shape) + " says (" + std::to_string(there) +
                  " bytes of data, " + std::to_string(h.data_bytes) + " needed)");
    if (h.data_bytes < there)
        throw bad(std::to_string(there - h.data_bytes) + " bytes of trailing data after the array of shape " +
                  npy_shape_text(h.shape) + " (" + std::to_string(h.data_bytes) + " bytes)");
    return h;
}

/// Reads an .npy file (read_npy_header says what is checked before the data is read).
inline NpyArray read_npy(const std::string& path) {
    const NpyHeader h = read_npy_header(path);
    NpyArray a;
    a.shape = h.shape;
    a.descr = h.descr;
    a.bytes.resize(h.data_bytes);
    std::FILE* f = std::fopen(path.c_str(), "rb");
    const bool ok = f != nullptr && std::fseek(f, long(h.data_offset), SEEK_SET) == 0 &&
                    std::fread(a.bytes.data(), 1, a.bytes.size(), f) == a.bytes.size();
    if (f != nullptr) std::fclose(f);
    if (!ok) throw std::runtime_error(path + ": cannot read its " + std::to_string(h.data_bytes) + " bytes of data");
    return a;
}

/// An IEEE half (binary16) as float: exact, subnormals, infinities and NaN included.
inline float half_bits_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    float magnitude;
    if (exp == 0) {
        magnitude = std::ldexp(float(mant), -24);  // subnormal: mant · 2^-24
    } else if (exp == 31) {
        magnitude = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    } else {
        magnitude = std::ldexp(float(mant | 0x400u), int(exp) - 25);  // 1.mant · 2^(exp-15)
    }
    std::uint32_t bits;
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
    std::memcpy(&magnitude, &bits, 4);
    return magnitude;
}

/// read_npy, with an error naming the file unless its element type is `t1` or `t2` (`what` says
/// which they are).
inline NpyArray read_npy_typed(const std::string& path, const char* t1, const char* t2, const char* what) {
    NpyArray a = read_npy(path);
    if (a.descr != t1 && a.descr != t2)
        throw std::runtime_error(path + ": element type is '" + a.descr + "', expected " + what +
                                 " (convert with numpy's astype)");
    return a;
}

/// Reads a float32 ('<f4') or float16 ('<f2') array as floats (every float16 is a float exactly);
/// the shape is returned through `shape`. Any other type is an error naming the file.
inline std::vector<float> read_npy_floats(const std::string& path, std::vector<std::size_t>* shape) {
    const NpyArray a = read_npy_typed(path, "<f4", "<f2", "float32 '<f4' or float16 '<f2'");
    std::vector<float> v(a.count());
    if (a.descr == "<f4") {
        if (!v.empty()) std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
    } else {
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = half_bits_to_float(std::uint16_t(a.bytes[2 * i] | (a.bytes[2 * i + 1] << 8)));
    }
    if (shape) *shape = a.shape;
    return v;
}

/// Reads an int32 ('<i4') or int64 ('<i8', NumPy's default integer) array as ints; the shape is
/// returned through `shape`. Any other type, or a value outside int's range, is an error naming
/// the file.
inline std::vector<int> read_npy_ints(const std::string& path, std::vector<std::size_t>* shape) {
    const NpyArray a = read_npy_typed(path, "<i4", "<i8", "int32 '<i4' or int64 '<i8'");
    std::vector<int> v(a.count());
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (a.descr == "<i4") {
            std::int32_t x;
            std::memcpy(&x, &a.bytes[4 * i], 4);
            v[i] = x;
        } else {
            std::int64_t x;
            std::memcpy(&x, &a.bytes[8 * i], 8);
            if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
                throw std::runtime_error(path + ": entry " + std::to_string(i) + " (" + std::to_string(x) +
                                         ") does not fit a 32-bit int");
            v[i] = int(x);
        }
    }
    if (shape) *shape = a.shape;
    return v;
}

}  // namespace fa
