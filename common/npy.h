/// @file npy.h
/// @brief Reads and writes NumPy .npy files (format 1.0/2.0), so results can be checked with NumPy or PyTorch.
///
/// `numpy.load("o.npy")` reads what write_npy() writes; read_npy() reads C-ordered arrays that
/// `numpy.save` writes. Element types: float32 ('<f4') and float16 ('<f2'); bfloat16 has no NumPy
/// type of its own, so 16-bit brain floats are exchanged as float32. Errors throw std::runtime_error
/// with the path and what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

/// Reads an .npy file (C order only). The shape's element count, and the bytes it takes, must fit
/// in 64 bits and in the file: a header that promises more than the file holds is an error before
/// any memory is allocated for it.
inline NpyArray read_npy(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("cannot open " + path);
    auto fail = [&](const std::string& why) {
        std::fclose(f);
        return std::runtime_error(path + ": " + why);
    };
    unsigned char pre[8];
    if (std::fread(pre, 1, 8, f) != 8 || pre[0] != 0x93 || std::string((char*)pre + 1, 5) != "NUMPY")
        throw fail("not an .npy file");
    std::size_t header_len = 0;
    if (pre[6] == 1) {
        unsigned char b[2];
        if (std::fread(b, 1, 2, f) != 2) throw fail("truncated header");
        header_len = b[0] | (std::size_t(b[1]) << 8);
    } else if (pre[6] == 2 || pre[6] == 3) {
        unsigned char b[4];
        if (std::fread(b, 1, 4, f) != 4) throw fail("truncated header");
        header_len = b[0] | (std::size_t(b[1]) << 8) | (std::size_t(b[2]) << 16) |
                     (std::size_t(b[3]) << 24);
    } else {
        throw fail("unsupported .npy version " + std::to_string(pre[6]));
    }
    std::string header(header_len, '\0');
    if (std::fread(&header[0], 1, header_len, f) != header_len) throw fail("truncated header");

    NpyArray a;
    const std::size_t d = header.find("'descr'");
    const std::size_t q1 = header.find('\'', header.find(':', d) + 1);
    const std::size_t q2 = header.find('\'', q1 + 1);
    if (d == std::string::npos || q1 == std::string::npos || q2 == std::string::npos)
        throw fail("header has no 'descr'");
    a.descr = header.substr(q1 + 1, q2 - q1 - 1);
    if (header.find("'fortran_order': True") != std::string::npos)
        throw fail("Fortran-ordered arrays are not supported (save with numpy.ascontiguousarray)");
    const std::size_t s0 = header.find('(', header.find("'shape'"));
    const std::size_t s1 = header.find(')', s0);
    if (s0 == std::string::npos || s1 == std::string::npos) throw fail("header has no 'shape'");
    try {
        a.shape = parse_npy_shape(header.substr(s0 + 1, s1 - s0 - 1));
    } catch (const std::runtime_error& e) {
        throw fail(e.what());
    }
    std::size_t elem = 0;
    if (a.descr == "<f4") elem = 4;
    else if (a.descr == "<f2") elem = 2;
    else if (a.descr == "<f8") elem = 8;
    else throw fail("unsupported element type '" + a.descr + "' (expected '<f4', '<f2' or '<f8')");
    std::size_t bytes = elem;
    for (std::size_t s : a.shape)
        if (s != 0 && bytes > SIZE_MAX / s)
            throw fail("shape " + npy_shape_text(a.shape) + " has more bytes than 64 bits can count");
        else
            bytes *= s;
    const long data_start = std::ftell(f);
    long file_end = -1;
    if (data_start >= 0 && std::fseek(f, 0, SEEK_END) == 0) file_end = std::ftell(f);
    if (file_end < 0 || std::fseek(f, data_start, SEEK_SET) != 0) throw fail("cannot find the file's size");
    if (bytes > std::size_t(file_end - data_start))
        throw fail("file is shorter than its shape " + npy_shape_text(a.shape) + " says (" +
                   std::to_string(file_end - data_start) + " bytes of data, " + std::to_string(bytes) +
                   " needed)");
    a.bytes.resize(bytes);
    if (std::fread(a.bytes.data(), 1, a.bytes.size(), f) != a.bytes.size())
        throw fail("file is shorter than its shape " + npy_shape_text(a.shape) + " says");
    std::fclose(f);
    return a;
}

/// Reads a float32 array, checking its type; the shape is returned through `shape`.
inline std::vector<float> read_npy_f32(const std::string& path, std::vector<std::size_t>* shape) {
    NpyArray a = read_npy(path);
    if (a.descr != "<f4")
        throw std::runtime_error(path + ": element type is '" + a.descr + "', expected float32 '<f4'");
    std::vector<float> v(a.count());
    if (!v.empty()) std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
    if (shape) *shape = a.shape;
    return v;
}

}  // namespace fa
